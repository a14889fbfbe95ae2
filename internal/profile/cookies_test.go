package profile

import "testing"

func TestDropCookies(t *testing.T) {
	for _, tc := range []struct {
		recorded string
		names    []string
		want     string
	}{
		{"sid=old", []string{"sid"}, ""},
		{"theme=dark; sid=old", []string{"sid"}, "theme=dark"},
		{"sid=old;theme=dark;  lang=en", []string{"sid", "lang"}, "theme=dark"},
		{"sidx=1; sid=2", []string{"sid"}, "sidx=1"},
		{"flag; sid=2", nil, "flag; sid=2"},
		{"", []string{"sid"}, ""},
	} {
		if got := DropCookies(tc.recorded, tc.names); got != tc.want {
			t.Errorf("DropCookies(%q, %q) = %q; want %q", tc.recorded, tc.names, got, tc.want)
		}
	}
}

func TestWithCookies(t *testing.T) {
	head := "GET /chat HTTP/1.1\r\nHost: h\r\n"
	for _, tc := range []struct {
		name, req string
		pairs     []string
		want      string
	}{
		{"no jar", head + "Cookie: sid=old\r\n\r\n", nil, head + "Cookie: sid=old\r\n\r\n"},
		{"replaces the recorded", head + "Cookie: sid=old\r\n\r\n", []string{"sid=new"}, head + "Cookie: sid=new\r\n\r\n"},
		{"keeps the others", head + "cookie: theme=dark; sid=old\r\nUpgrade: websocket\r\n\r\n", []string{"sid=new"}, head + "Cookie: theme=dark; sid=new\r\nUpgrade: websocket\r\n\r\n"},
		{"a second header", head + "Cookie: sid=old\r\nCookie: sid=older; a=1\r\n\r\n", []string{"sid=new", "b=2"}, head + "Cookie: sid=new; b=2\r\nCookie: a=1\r\n\r\n"},
		{"none recorded", head + "\r\n", []string{"sid=new"}, "GET /chat HTTP/1.1\r\nCookie: sid=new\r\nHost: h\r\n\r\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := string(WithCookies([]byte(tc.req), tc.pairs)); got != tc.want {
				t.Errorf("got\n%q\nwant\n%q", got, tc.want)
			}
		})
	}
}
