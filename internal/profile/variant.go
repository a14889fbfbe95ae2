package profile

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// Variants: one protocol's clients may log in more than one way (a
// socket.io client with its default transports polls over HTTP before
// it upgrades; one told to use WebSocket only does not). A profile file
// gives its own way and the others, each replacing the HTTP steps, the
// login or the connect address; the recording picks the one it shows
// (the variant's when over its upgrade request), and --variant forces
// one whatever the recording shows.

// DefaultVariant names a profile file's own way when it gives no name.
const DefaultVariant = "default"

// maxVariants bounds a profile's variants.
const maxVariants = 8

// variant is a compiled VariantSpec: the whole profile with its fields.
type variant struct {
	when *regexp.Regexp
	p    *Profile
}

// compileVariants compiles each variant as the file with the variant's
// fields in place of its own, every mistake of every variant at once.
// When the file's own fields failed (baseOK false), a variant names only
// the mistakes in the fields it gives itself: the rest are the file's,
// named once.
func (s *Spec) compileVariants(p *Profile, baseOK bool) error {
	p.variant = s.Variant
	if p.variant == "" {
		p.variant = DefaultVariant
	}
	var errs specErrors
	if len(s.Variants) > maxVariants {
		errs.add(bad("variants", "%d variants: at most %d", len(s.Variants), maxVariants))
	}
	seen := map[string]bool{p.variant: true}
	for i, v := range s.Variants {
		path := fmt.Sprintf("variants[%d]", i)
		if !validName.MatchString(v.Name) || seen[v.Name] {
			errs.add(bad(path+".name", "%q: a variant's name is lower case letters, digits and _, once (the file's own is %s)", v.Name, p.variant))
		}
		seen[v.Name] = true
		var when *regexp.Regexp
		if v.When != "" {
			var err error
			if when, err = regexp.Compile(v.When); err != nil {
				errs.add(bad(path+".when", "%q: %v", v.When, err))
			}
		}
		vs := *s
		vs.Variant, vs.Variants = v.Name, nil
		own := map[string]bool{}
		if v.HTTP != nil {
			vs.HTTP, own["http"] = v.HTTP, true
		}
		if v.Login != nil {
			vs.Login, own["login"] = *v.Login, true
		}
		if v.Connect != "" {
			vs.Connect, own["connect"] = v.Connect, true
		}
		if v.UpgradeQuery != nil {
			own["upgrade_query"] = true
			vs.UpgradeQuery = map[string]string{}
			for k, q := range s.UpgradeQuery {
				vs.UpgradeQuery[k] = q
			}
			for k, q := range v.UpgradeQuery {
				vs.UpgradeQuery[k] = q
			}
		}
		vp, err := vs.compile()
		if err != nil {
			errs.add(variantErrors(path, err, baseOK, own))
			continue
		}
		p.variants = append(p.variants, variant{when: when, p: vp})
	}
	return errs.err()
}

// variantErrors are variant path's compile errors at their paths under
// it; all of them when the file's own fields compiled, else only those
// in the fields the variant gives itself (own, by top key).
func variantErrors(path string, err error, all bool, own map[string]bool) error {
	var errs specErrors
	if !errors.As(err, &errs) {
		errs = specErrors{err}
	}
	var out specErrors
	for _, e := range errs {
		var se *specError
		switch {
		case errors.As(e, &se):
			top, _, _ := strings.Cut(se.path, ".")
			top, _, _ = strings.Cut(top, "[")
			if all || own[top] {
				out.add(&specError{path + "." + se.path, se.err})
			}
		case all:
			out.add(fmt.Errorf("%s: %w", path, e))
		}
	}
	if len(out) > 0 {
		return out
	}
	return nil
}

// Variant is the name of the way p's clients log in.
func (p *Profile) Variant() string { return p.variant }

// Variants are the names of the ways p's clients may log in, p's own
// first.
func (p *Profile) Variants() []string {
	out := []string{p.variant}
	for _, v := range p.variants {
		out = append(out, v.p.variant)
	}
	return out
}

// pickVariant is the profile a recording compiles with: the variant
// named (forced), else the first whose when matches the recorded
// upgrade request (or first client message), else p; why says how it
// was chosen, "" for p by default.
func (p *Profile) pickVariant(name string, m Messages) (*Profile, string, error) {
	if name != "" {
		if name == p.variant {
			return p, "--variant " + name, nil
		}
		for _, v := range p.variants {
			if v.p.variant == name {
				return v.p, "--variant " + name, nil
			}
		}
		return nil, "", fmt.Errorf("--variant %s: profile %s has %s", name, p.Name, strings.Join(p.Variants(), ", "))
	}
	shown := m.Upgrade
	if shown == nil && len(m.Client) > 0 {
		shown = m.Client[0].Bytes
	}
	for _, v := range p.variants {
		if v.when != nil && shown != nil && v.when.Match(shown) {
			return v.p, fmt.Sprintf("the recording matches %q (--variant %s forces the other way)", v.when, p.variant), nil
		}
	}
	return p, "", nil
}
