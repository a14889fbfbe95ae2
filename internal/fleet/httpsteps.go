package fleet

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/reprise-harness/reprise/internal/profile"
)

// A profile's HTTP steps: the requests a client makes before it dials
// (a seat, a token, the game server's address). The profile composes
// each request and reads each answer's values; the fleet does the
// requests, one keep-alive connection and one cookie jar per client as a
// browser would (the jar's cookies go with the upgrade too),
// bounded in answer size, redirects and time (the login's deadline
// covers the steps, the dial and the login).

// maxHTTPAnswer bounds an HTTP step's answer: its head and its body
// each (net/http's default head bound is 10 MiB, which a client logging
// in would hold at once); maxRedirects the redirects followed in one
// step.
const (
	maxHTTPAnswer = 1 << 20
	maxRedirects  = 5
)

var errRedirects = errors.New("too many redirects")

// httpSteps runs the client's HTTP steps; it returns where to connect
// ("" for the target) and the client's cookie jar (cookies.go: kept for
// the run by the client's index; nil for a client that never made a
// step, which pays nothing), or why the login failed there.
func (c *client) httpSteps(ctx context.Context, deadline time.Time) (string, *cookieJar, LoginResult, bool) {
	hs, ok := c.pc.(profile.HTTPStepper)
	if !ok {
		return "", c.f.jarIfAny(c.idx), LoginResult{}, true
	}
	if _, ok := hs.HTTPRequest(0); !ok {
		return hs.ConnectAddr(), c.f.jarIfAny(c.idx), LoginResult{}, true
	}
	run := ctx
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	d := net.Dialer{Deadline: deadline}
	tr := &http.Transport{DialContext: d.DialContext, MaxIdleConnsPerHost: 1, ResponseHeaderTimeout: time.Until(deadline),
		MaxResponseHeaderBytes: maxHTTPAnswer}
	if c.f.tlsCfg != nil { // --tls: its trust and client certificate, the name from each URL
		tr.TLSClientConfig = c.f.tlsCfg.Clone()
		tr.TLSClientConfig.ServerName = ""
	}
	defer tr.CloseIdleConnections()
	jar := c.f.jarOf(c.idx)
	hc := &http.Client{Transport: tr, Jar: jar, CheckRedirect: func(_ *http.Request, via []*http.Request) error {
		if len(via) > maxRedirects {
			return errRedirects
		}
		return nil
	}}
	for i := 0; ; i++ {
		r, ok := hs.HTTPRequest(i)
		if !ok {
			return hs.ConnectAddr(), jar, LoginResult{}, true
		}
		var res LoginResult
		if r.Socket { // a realtime connection played as a step (the lobby's socket)
			res = c.socketStep(ctx, deadline, jar, hs, i, r)
		} else {
			res = c.httpStep(ctx, hc, jar, hs, i, r)
		}
		if !res.OK() {
			if run.Err() != nil { // the run ended (its duration), not the login's deadline
				return "", nil, loginFail(LoginStopped), false
			}
			res.step = r.Step
			c.f.httpTimes.failedAt(r.Step)
			return "", nil, res, false
		}
	}
}

// httpStep does one request and hands its answer to the profile.
func (c *client) httpStep(ctx context.Context, hc *http.Client, jar *cookieJar, hs profile.HTTPStepper, i int, r profile.HTTPRequest) LoginResult {
	url := r.URL
	if strings.HasPrefix(url, "/") {
		scheme := "http://"
		if c.f.tlsCfg != nil {
			scheme = "https://"
		}
		url = scheme + c.f.target + url
	}
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, url, body)
	if err != nil {
		return loginFail(LoginHTTPError)
	}
	for _, h := range r.Headers {
		if strings.EqualFold(h[0], "Host") {
			req.Host = h[1]
			continue
		}
		req.Header.Set(h[0], h[1])
	}
	if v := req.Header.Get("Cookie"); v != "" { // the jar's own go after it
		if v = profile.DropCookies(v, jar.names(req.URL)); v != "" {
			req.Header.Set("Cookie", v)
		} else {
			req.Header.Del("Cookie")
		}
	}
	start := time.Now()
	resp, err := hc.Do(req)
	if err != nil {
		return httpReason(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, maxHTTPAnswer+1))
	if err == nil {
		// Answered, whatever its status: the step's time, not the login's.
		c.f.httpTimes.record(r.Step, time.Since(start))
	}
	switch {
	case err != nil:
		return httpReason(err)
	case len(b) > maxHTTPAnswer:
		return loginFail(LoginHTTPTooLarge)
	case resp.StatusCode/100 != 2:
		return LoginResult{code: LoginHTTPStatus, said: strconv.Itoa(resp.StatusCode)}
	}
	if missing := hs.HTTPAnswer(i, resp.Header.Get, b); missing != "" {
		return LoginResult{code: LoginHTTPAnswer, said: missing}
	}
	return LoginResult{}
}

// httpReason names a request that got no answer.
func httpReason(err error) LoginResult {
	switch {
	case errors.Is(err, errRedirects):
		return loginFail(LoginHTTPRedirects)
	case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
		return loginFail(LoginTimeout)
	case errors.Is(err, context.Canceled):
		return loginFail(LoginStopped)
	case strings.Contains(err.Error(), "response headers exceeded"):
		// net/http's head bound (MaxResponseHeaderBytes), which it
		// names in no error value of its own.
		return loginFail(LoginHTTPTooLarge)
	}
	if r := dialReason(err); r.code != LoginConnectError {
		return r
	}
	return loginFail(LoginHTTPError)
}
