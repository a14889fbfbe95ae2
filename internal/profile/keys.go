package profile

import (
	"fmt"
	"reflect"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// A profile file's keys and scalar types are checked before it is
// decoded, against the Spec's own yaml names, so that every mistake is
// named at once in the profile's words: "p.yaml:12:
// kinds.client[0].match.regex: unknown key (did you mean regexp?)", not
// yaml's "field regex not found in type profile.MatchSpec", one at a time.

// maxKeyErrors bounds the mistakes a profile's check names.
const maxKeyErrors = 20

// keyError is one mistake at a key path and line.
type keyError struct {
	line int
	path string
	msg  string
}

// sendItemKeys are a template's keys in a send list (SendItem decodes
// itself: a kind name, a template, or a kind with a template for when
// the recording has none).
var sendItemKeys = []string{"kind", "text", "hex", "as"}

var (
	sendItemType = reflect.TypeFor[SendItem]()
	durationType = reflect.TypeFor[Duration]()
)

// checkKeys walks a profile's YAML document along the Spec type and
// returns its unknown keys and ill-typed scalars, at most maxKeyErrors
// and how many more there were.
func checkKeys(data []byte) ([]keyError, int) {
	var root yaml.Node
	if yaml.Unmarshal(data, &root) != nil || len(root.Content) == 0 {
		return nil, 0 // yaml's own error says what is wrong with the document
	}
	var errs []keyError
	walkKeys(root.Content[0], reflect.TypeFor[Spec](), "", &errs)
	if len(errs) > maxKeyErrors {
		return errs[:maxKeyErrors], len(errs) - maxKeyErrors
	}
	return errs, 0
}

func joinPath(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// walkKeys checks node n, decoded as type t at path.
func walkKeys(n *yaml.Node, t reflect.Type, path string, errs *[]keyError) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	switch {
	case t == durationType:
		durationValue(n, path, errs)
		return
	case t == sendItemType:
		sendItemValue(n, path, errs)
		return
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			if !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
				*errs = append(*errs, keyError{n.Line, path, "want a mapping of keys (key: value)"})
			}
			return
		}
		fields := yamlFields(t)
		names := make([]string, 0, len(fields))
		for name := range fields {
			names = append(names, name)
		}
		sort.Strings(names)
		mappingKeys(n, path, names, func(key string, v *yaml.Node) {
			walkKeys(v, fields[key], joinPath(path, key), errs)
		}, errs)
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			if !(n.Kind == yaml.ScalarNode && n.Tag == "!!null") {
				*errs = append(*errs, keyError{n.Line, path, "want a list"})
			}
			return
		}
		for i, item := range n.Content {
			walkKeys(item, t.Elem(), fmt.Sprintf("%s[%d]", path, i), errs)
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			*errs = append(*errs, keyError{n.Line, path, "want a mapping"})
			return
		}
		mappingKeys(n, path, nil, func(key string, v *yaml.Node) {
			walkKeys(v, t.Elem(), joinPath(path, key), errs)
		}, errs)
	default:
		scalarType(n, t, path, errs)
	}
}

// mappingKeys checks a mapping's keys against known (nil: any key, a
// map's) and that none is given twice, and calls each for the known ones
// (each nil: none).
func mappingKeys(n *yaml.Node, path string, known []string, each func(key string, v *yaml.Node), errs *[]keyError) {
	first := map[string]int{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k := n.Content[i]
		if line, ok := first[k.Value]; ok {
			*errs = append(*errs, keyError{k.Line, joinPath(path, k.Value), fmt.Sprintf("given twice (first at line %d)", line)})
			continue
		}
		first[k.Value] = k.Line
		if known != nil && !contains(known, k.Value) {
			msg := "unknown key"
			if s := suggest(k.Value, known); s != "" {
				msg += " (did you mean " + s + "?)"
			} else {
				msg += " (keys here: " + strings.Join(known, ", ") + ")"
			}
			*errs = append(*errs, keyError{k.Line, joinPath(path, k.Value), msg})
			continue
		}
		if each != nil {
			each(k.Value, n.Content[i+1])
		}
	}
}

// scalarType checks that a scalar fits a number, a bool or a string.
func scalarType(n *yaml.Node, t reflect.Type, path string, errs *[]keyError) {
	if n.Kind != yaml.ScalarNode {
		*errs = append(*errs, keyError{n.Line, path, "want a single value, not a list or a mapping"})
		return
	}
	want := ""
	switch t.Kind() {
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		var v int64
		switch {
		case n.Tag != "!!int":
			want = "a whole number"
		case n.Decode(&v) != nil || reflect.New(t).Elem().OverflowInt(v):
			want = fmt.Sprintf("a whole number from %d to %d", -1<<(t.Bits()-1), 1<<(t.Bits()-1)-1)
		}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		var v uint64
		switch {
		case n.Tag != "!!int":
			want = "a whole number"
		case n.Decode(&v) != nil || reflect.New(t).Elem().OverflowUint(v):
			want = fmt.Sprintf("a whole number from 0 to %d", uint64(1)<<t.Bits()-1)
		}
	case reflect.Bool:
		if n.Tag != "!!bool" {
			want = "true or false"
		}
	}
	if want != "" && n.Tag != "!!null" {
		*errs = append(*errs, keyError{n.Line, path, fmt.Sprintf("%q: want %s", n.Value, want)})
	}
}

// sendItemValue checks a send list's item: a kind name, or a template's
// keys with a single value each, and no "as" beside a kind it differs
// from (the recorded run counts as its kind).
func sendItemValue(n *yaml.Node, path string, errs *[]keyError) {
	switch n.Kind {
	case yaml.ScalarNode:
		return
	case yaml.MappingNode:
	default:
		*errs = append(*errs, keyError{n.Line, path, "want a kind name or a template (text or hex, with as)"})
		return
	}
	vals := map[string]*yaml.Node{}
	mappingKeys(n, path, sendItemKeys, func(key string, v *yaml.Node) {
		if v.Kind != yaml.ScalarNode {
			*errs = append(*errs, keyError{v.Line, joinPath(path, key), "want a single value, not a list or a mapping"})
			return
		}
		vals[key] = v
	}, errs)
	if k, as := vals["kind"], vals["as"]; k != nil && as != nil && k.Value != "" && as.Value != "" && as.Value != k.Value {
		*errs = append(*errs, keyError{as.Line, joinPath(path, "as"), fmt.Sprintf("a send with kind %s counts as that kind: drop as", k.Value)})
	}
}

// durationValue checks that a scalar is a duration, as Duration's
// decoder will, so that it is named with its key path beside the rest.
func durationValue(n *yaml.Node, path string, errs *[]keyError) {
	if n.Kind != yaml.ScalarNode {
		*errs = append(*errs, keyError{n.Line, path, "want a duration like 5s, not a list or a mapping"})
		return
	}
	if n.Tag == "!!null" {
		return
	}
	if v, err := time.ParseDuration(n.Value); err != nil || v < 0 {
		*errs = append(*errs, keyError{n.Line, path, fmt.Sprintf("%q is not a duration like 5s", n.Value)})
	}
}

// yamlFields maps a struct's yaml keys to their types.
func yamlFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for f := range t.Fields() {
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("yaml"), ",")
		if name == "-" {
			continue
		}
		if name == "" {
			name = strings.ToLower(f.Name)
		}
		out[name] = f.Type
	}
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// suggest is the candidate closest to s by edit distance, when it is
// close enough to be a slip (at most a third of the longer word, and at
// most 3), or shares a prefix of 4 letters; "" otherwise.
func suggest(s string, candidates []string) string {
	best, bestD := "", 1<<30
	for _, c := range candidates {
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if d < bestD {
			best, bestD = c, d
		}
	}
	if best == "" {
		return ""
	}
	if limit := min(3, max(1, max(len(s), len(best))/3)); bestD <= limit {
		return best
	}
	for _, c := range candidates {
		if len(s) >= 4 && len(c) >= 4 && s[:4] == c[:4] {
			return c
		}
	}
	return ""
}

// editDistance is the edit distance between a and b, a swap of two
// neighbours counting as one edit (optimal string alignment).
func editDistance(a, b string) int {
	rows := make([][]int, len(a)+1)
	for i := range rows {
		rows[i] = make([]int, len(b)+1)
		rows[i][0] = i
	}
	for j := range rows[0] {
		rows[0][j] = j
	}
	for i := 1; i <= len(a); i++ {
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			d := min(rows[i-1][j]+1, rows[i][j-1]+1, rows[i-1][j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				d = min(d, rows[i-2][j-2]+1)
			}
			rows[i][j] = d
		}
	}
	return rows[len(a)][len(b)]
}

// keyErrorsError renders the mistakes as one error, a line each.
func keyErrorsError(file string, errs []keyError, more int) error {
	lines := make([]string, 0, len(errs)+1)
	for _, e := range errs {
		lines = append(lines, (&LineError{File: file, Line: e.line, Path: e.path, Err: fmt.Errorf("%s", e.msg)}).Error())
	}
	if more > 0 {
		lines = append(lines, fmt.Sprintf("%s: and %d more", file, more))
	}
	return &KeyErrors{Lines: lines, first: &LineError{File: file, Line: errs[0].line, Path: errs[0].path, Err: fmt.Errorf("%s", errs[0].msg)}}
}

// KeyErrors are a profile file's unknown keys and ill-typed values, a
// line each ("file:line: key.path: what"); it unwraps to the first as a
// *LineError.
type KeyErrors struct {
	Lines []string
	first *LineError
}

func (e *KeyErrors) Error() string { return strings.Join(e.Lines, "\n") }

func (e *KeyErrors) Unwrap() error { return e.first }

// kindHint follows "is not a ... kind": the kind probably meant, or the
// kinds there are.
func (p *Profile) kindHint(name string, server bool) string {
	var names []string
	if server {
		for _, k := range p.server {
			names = append(names, k.name)
		}
	} else if len(p.Kinds) > 1 {
		names = p.Kinds[1:]
	}
	if s := suggest(name, names); s != "" {
		return " (did you mean " + s + "?)"
	}
	if len(names) == 0 {
		return " (there are none)"
	}
	return " (kinds: " + strings.Join(names, ", ") + ")"
}

// oneOf is the error for a value that is none of an enumeration's words:
// the words, and the one probably meant.
func oneOf(path, got string, words ...string) error {
	msg := fmt.Sprintf("%q: %s", got, orList(words))
	if s := suggest(got, words); s != "" && got != "" {
		msg += " (did you mean " + s + "?)"
	}
	return bad(path, "%s", msg)
}

// orList is "a, b or c".
func orList(words []string) string {
	if len(words) < 2 {
		return strings.Join(words, "")
	}
	return strings.Join(words[:len(words)-1], ", ") + " or " + words[len(words)-1]
}

// framingTypes are framing.type's words.
var framingTypes = []string{"length", "varint", "delimiter", "counted", "resp", "message", "raw"}
