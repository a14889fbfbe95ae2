package profile

import (
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// How a profile's HTTP steps map onto a recording's HTTP flows: each
// step is matched to the first recorded request (in flow order, each
// request once) of its method whose path matches the step's URL path,
// its ${...} values standing for any segment text. inspect and profile
// check print the map, so that a step the recorded client never made,
// or a recorded request no step makes, shows before a run.

// stepRef is a ${...} value in a step's URL.
var stepRef = regexp.MustCompile(`\$\{[^}]*\}`)

// pathPattern is a regexp of the path of a step's URL (a path, or an
// absolute URL past its host; before its ?): literals as they are,
// each value any text but / and ?.
func pathPattern(tmpl string) *regexp.Regexp {
	if _, rest, ok := strings.Cut(tmpl, "://"); ok {
		tmpl = "/"
		if i := strings.IndexByte(rest, '/'); i >= 0 {
			tmpl = rest[i:]
		}
	}
	if i := strings.IndexByte(tmpl, '?'); i >= 0 {
		tmpl = tmpl[:i]
	}
	lits := stepRef.Split(tmpl, -1)
	for i, l := range lits {
		lits[i] = regexp.QuoteMeta(l)
	}
	return regexp.MustCompile("^" + strings.Join(lits, "[^/?]*") + "$")
}

// urlPath is the path of a recorded request target or an absolute URL.
func urlPath(target string) string {
	if u, err := url.Parse(target); err == nil && u.Host != "" {
		target = u.RequestURI()
	}
	p, _, _ := strings.Cut(target, "?")
	return p
}

// StepMap says, for each of the profile's HTTP steps (of the variant
// the recording logs in as), which recorded request it stands for.
func (r *Report) StepMap(flows []FlowData) []string {
	p := r.prof
	if p == nil || len(p.http) == 0 {
		return nil
	}
	used := map[[2]int]bool{}
	var out []string
	for i := range p.http {
		st := &p.http[i]
		tmpl := st.urlText
		re := pathPattern(tmpl)
		found := ""
	search:
		for _, f := range flows {
			for j, e := range f.HTTP {
				if used[[2]int{f.Index, j}] || e.Method != st.method || !re.MatchString(urlPath(e.Target)) {
					continue
				}
				used[[2]int{f.Index, j}] = true
				found = fmt.Sprintf("flow %d's %s", f.Index, e)
				break search
			}
		}
		if found == "" {
			found = "no recorded request of this method and path: the recorded client did not make it"
		}
		out = append(out, fmt.Sprintf("http step %s (%s %s): %s", st.name, st.method, tmpl, found))
	}
	for _, f := range flows {
		for j, e := range f.HTTP {
			if !used[[2]int{f.Index, j}] {
				out = append(out, fmt.Sprintf("no http step makes flow %d's %s", f.Index, e))
			}
		}
	}
	return out
}
