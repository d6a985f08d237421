package stack

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// ParamType is the type of a parameter's value.
type ParamType string

// Parameter types and the Go type of their values.
const (
	ParamString  ParamType = "string"  // string
	ParamInteger ParamType = "integer" // int64
	ParamNumber  ParamType = "number"  // float64 (never money: pass amounts as strings)
	ParamBoolean ParamType = "boolean" // bool
	ParamList    ParamType = "list"    // []any of string, int64, float64 or bool
)

// Parameter is one declared parameter.
type Parameter struct {
	Name        string
	Type        ParamType
	Description string
	// Default is the value when no argument is given; HasDefault says
	// whether there is one.
	Default    any
	HasDefault bool
	// Min and Max bound a number or integer, or the length of a string
	// (in characters) or a list; nil when absent.
	Min, Max *float64
	// Allowed, when not empty, lists the values a scalar may take, or the
	// values each element of a list may take.
	Allowed []any
	// Pattern is an RE2 expression the whole string (or each string
	// element of a list) must match.
	Pattern string
	// Line and Column locate the parameter's name in the template.
	Line, Column int

	re *regexp.Regexp
}

// paramKeys are the keys a parameter may have.
var paramKeys = []string{"type", "description", "default", "min", "max", "allowed", "pattern"}

// parseParameter reads one parameter's declaration.
func parseParameter(name string, kn, n *node, path string, errs *errList) *Parameter {
	p := &Parameter{Name: name, Line: kn.line, Column: kn.col}
	if n.kind != nMap {
		errs.atNode(n, path, "must be a mapping with a type")
		return nil
	}
	checkKeys(n, path, paramKeys, errs)
	t := n.get("type")
	if t == nil {
		errs.atNode(kn, path, "missing type (one of string, integer, number, boolean, list)")
		return nil
	}
	switch ts, _ := t.lit.(string); ParamType(ts) {
	case ParamString, ParamInteger, ParamNumber, ParamBoolean, ParamList:
		p.Type = ParamType(ts)
	default:
		errs.atNode(t, path+".type", "must be one of string, integer, number, boolean, list")
		return nil
	}
	p.Description = stringField(n, "description", path, errs)
	p.Min = boundField(p, n, "min", path, errs)
	p.Max = boundField(p, n, "max", path, errs)
	if p.Min != nil && p.Max != nil && *p.Min > *p.Max {
		errs.atNode(n.get("max"), path+".max", "max %s is less than min %s", fmtNum(*p.Max), fmtNum(*p.Min))
	}
	if pat := n.get("pattern"); pat != nil {
		p.parsePattern(pat, path+".pattern", errs)
	}
	if al := n.get("allowed"); al != nil {
		p.parseAllowed(al, path+".allowed", errs)
	}
	if d := n.get("default"); d != nil {
		v, msg := p.fromNode(d)
		if msg == "" {
			msg = p.check(v)
		}
		if msg != "" {
			errs.atNode(d, path+".default", "%s", msg)
		} else {
			p.Default, p.HasDefault = v, true
		}
	}
	return p
}

// boundField reads min or max, which must be numbers; for strings and lists
// they bound the length and must be non-negative integers.
func boundField(p *Parameter, n *node, key, path string, errs *errList) *float64 {
	b := n.get(key)
	if b == nil {
		return nil
	}
	path += "." + key
	var f float64
	switch v := b.lit.(type) {
	case int64:
		f = float64(v)
	case float64:
		f = v
	default:
		errs.atNode(b, path, "must be a number")
		return nil
	}
	switch p.Type {
	case ParamBoolean:
		errs.atNode(b, path, "does not apply to a boolean")
		return nil
	case ParamString, ParamList:
		if f < 0 || f != math.Trunc(f) {
			errs.atNode(b, path, "must be a non-negative integer (it bounds the length)")
			return nil
		}
	}
	return &f
}

// parsePattern compiles the pattern, anchored.
func (p *Parameter) parsePattern(n *node, path string, errs *errList) {
	s, ok := n.lit.(string)
	switch {
	case !ok:
		errs.atNode(n, path, "must be a string")
	case p.Type != ParamString && p.Type != ParamList:
		errs.atNode(n, path, "applies to strings and lists only")
	default:
		re, err := regexp.Compile(`^(?:` + s + `)$`)
		if err != nil {
			errs.atNode(n, path, "invalid regular expression: %v", err)
			return
		}
		p.Pattern, p.re = s, re
	}
}

// parseAllowed reads the allowed values, each of the parameter's type (of
// an element's type for a list).
func (p *Parameter) parseAllowed(n *node, path string, errs *errList) {
	if p.Type == ParamBoolean {
		errs.atNode(n, path, "does not apply to a boolean")
		return
	}
	if n.kind != nList || len(n.list) == 0 {
		errs.atNode(n, path, "must be a non-empty list")
		return
	}
	for i, e := range n.list {
		v, msg := p.elementFromNode(e)
		if msg != "" {
			errs.atNode(e, fmt.Sprintf("%s[%d]", path, i), "%s", msg)
			continue
		}
		p.Allowed = append(p.Allowed, v)
	}
}

// fromNode reads a value of the parameter's type from the template.
func (p *Parameter) fromNode(n *node) (any, string) {
	if p.Type != ParamList {
		return p.elementFromNode(n)
	}
	if n.kind != nList {
		return nil, "must be a list"
	}
	out := make([]any, 0, len(n.list))
	for i, e := range n.list {
		v, ok := scalarElement(e.lit)
		if e.kind != nLiteral || !ok {
			return nil, fmt.Sprintf("element %d must be a string, number or boolean", i)
		}
		out = append(out, v)
	}
	return out, ""
}

// elementFromNode reads a scalar of the parameter's type (any scalar for a
// list's element).
func (p *Parameter) elementFromNode(n *node) (any, string) {
	if n.kind != nLiteral {
		return nil, "must be " + p.typeWord()
	}
	if p.Type == ParamList {
		if v, ok := scalarElement(n.lit); ok {
			return v, ""
		}
		return nil, "must be a string, number or boolean"
	}
	return p.convert(n.lit)
}

// scalarElement accepts a list element.
func scalarElement(v any) (any, bool) {
	switch v.(type) {
	case string, int64, float64, bool:
		return v, true
	}
	return nil, false
}

// convert converts a decoded scalar to the parameter's (scalar) type.
func (p *Parameter) convert(v any) (any, string) {
	switch p.Type {
	case ParamString:
		if s, ok := v.(string); ok {
			return s, ""
		}
	case ParamInteger:
		if i, ok := toInt64(v); ok {
			return i, ""
		}
	case ParamNumber:
		if f, ok := toFloat64(v); ok {
			return f, ""
		}
	case ParamBoolean:
		if b, ok := v.(bool); ok {
			return b, ""
		}
	}
	return nil, "must be " + p.typeWord()
}

// typeWord names the type in messages.
func (p *Parameter) typeWord() string {
	switch p.Type {
	case ParamInteger:
		return "an integer"
	case ParamList:
		return "a list"
	}
	return "a " + string(p.Type)
}

// toInt64 accepts whole numbers of any Go numeric type, JSON's included.
func toInt64(v any) (int64, bool) {
	switch x := v.(type) {
	case int64:
		return x, true
	case int:
		return int64(x), true
	case int32:
		return int64(x), true
	case float64:
		if x == math.Trunc(x) && math.Abs(x) < 1<<53 {
			return int64(x), true
		}
	case json.Number:
		i, err := x.Int64()
		return i, err == nil
	}
	return 0, false
}

// toFloat64 accepts any Go numeric type, JSON's included.
func toFloat64(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case float32:
		return float64(x), true
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	case int32:
		return float64(x), true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil && !math.IsInf(f, 0) && !math.IsNaN(f)
	}
	return 0, false
}

// check returns the first constraint v breaks, or "".
func (p *Parameter) check(v any) string {
	if list, ok := v.([]any); ok {
		if msg := p.checkSize(float64(len(list)), "length %d"); msg != "" {
			return msg
		}
		for i, e := range list {
			if msg := p.checkElement(e); msg != "" {
				return fmt.Sprintf("element %d: %s", i, msg)
			}
		}
		return ""
	}
	switch x := v.(type) {
	case string:
		if msg := p.checkSize(float64(utf8.RuneCountInString(x)), "length %d"); msg != "" {
			return msg
		}
	case int64:
		if msg := p.checkSize(float64(x), "%d"); msg != "" {
			return msg
		}
	case float64:
		if msg := p.checkSize(x, "%s"); msg != "" {
			return msg
		}
	}
	return p.checkElement(v)
}

// checkSize checks a number (or a length) against min and max; what
// describes it.
func (p *Parameter) checkSize(f float64, what string) string {
	desc := fmt.Sprintf(what, fmtNumArg(what, f))
	if p.Min != nil && f < *p.Min {
		return fmt.Sprintf("%s is less than min %s", desc, fmtNum(*p.Min))
	}
	if p.Max != nil && f > *p.Max {
		return fmt.Sprintf("%s is more than max %s", desc, fmtNum(*p.Max))
	}
	return ""
}

// fmtNumArg returns f as the verb in what expects it.
func fmtNumArg(what string, f float64) any {
	if strings.Contains(what, "%d") {
		return int64(f)
	}
	return fmtNum(f)
}

// checkElement checks allowed and pattern on a scalar.
func (p *Parameter) checkElement(v any) string {
	if len(p.Allowed) > 0 && !p.allows(v) {
		words := make([]string, len(p.Allowed))
		for i, a := range p.Allowed {
			words[i] = formatScalar(a)
		}
		return fmt.Sprintf("%s is not allowed (allowed: %s)", formatScalar(v), strings.Join(words, ", "))
	}
	if p.re != nil {
		s, ok := v.(string)
		if !ok {
			return fmt.Sprintf("%s is not a string (pattern %s)", formatScalar(v), p.Pattern)
		}
		if !p.re.MatchString(s) {
			return fmt.Sprintf("%q does not match pattern %s", s, p.Pattern)
		}
	}
	return ""
}

// allows reports whether v is one of the allowed values.
func (p *Parameter) allows(v any) bool {
	for _, a := range p.Allowed {
		if Equal(a, v) {
			return true
		}
	}
	return false
}

// parseArg parses a command-line value by the parameter's type.
func (p *Parameter) parseArg(s string) (any, string) {
	switch p.Type {
	case ParamString:
		return s, ""
	case ParamInteger:
		i, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
		if err != nil {
			return nil, fmt.Sprintf("%q is not an integer", s)
		}
		return i, ""
	case ParamNumber:
		f, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return nil, fmt.Sprintf("%q is not a number", s)
		}
		return f, ""
	case ParamBoolean:
		switch s {
		case "true":
			return true, ""
		case "false":
			return false, ""
		}
		return nil, fmt.Sprintf("%q is not a boolean (true or false)", s)
	}
	return parseListArg(s)
}

// parseListArg parses a list: a JSON array when it starts with '[', else
// comma-separated strings ("" is the empty list).
func parseListArg(s string) (any, string) {
	t := strings.TrimSpace(s)
	if strings.HasPrefix(t, "[") {
		dec := json.NewDecoder(bytes.NewReader([]byte(t)))
		dec.UseNumber()
		var raw []any
		if err := dec.Decode(&raw); err != nil || dec.More() {
			return nil, fmt.Sprintf("%q is not a JSON array", s)
		}
		return listValue(raw)
	}
	if t == "" {
		return []any{}, ""
	}
	fields := strings.Split(s, ",")
	out := make([]any, len(fields))
	for i, f := range fields {
		out[i] = strings.TrimSpace(f)
	}
	return out, ""
}

// listValue converts a decoded JSON list into a list value.
func listValue(raw []any) (any, string) {
	out := make([]any, len(raw))
	for i, e := range raw {
		switch x := e.(type) {
		case string, bool:
			out[i] = x
		case json.Number:
			if n, err := x.Int64(); err == nil {
				out[i] = n
			} else if f, ok := toFloat64(x); ok {
				out[i] = f
			} else {
				return nil, fmt.Sprintf("element %d is not a finite number", i)
			}
		case float64:
			if n, ok := toInt64(x); ok {
				out[i] = n
			} else {
				out[i] = x
			}
		default:
			return nil, fmt.Sprintf("element %d must be a string, number or boolean", i)
		}
	}
	return out, ""
}

// fromValue converts a typed value from an API caller.
func (p *Parameter) fromValue(v any) (any, string) {
	if p.Type != ParamList {
		return p.convert(v)
	}
	switch x := v.(type) {
	case []any:
		return listValue(x)
	case []string:
		out := make([]any, len(x))
		for i, s := range x {
			out[i] = s
		}
		return out, ""
	}
	return nil, "must be a list"
}

// fmtNum formats a number without exponent or trailing zeros.
func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// formatScalar formats a scalar for messages and embedding.
func formatScalar(v any) string {
	switch x := v.(type) {
	case string:
		return strconv.Quote(x)
	case float64:
		return fmtNum(x)
	}
	return fmt.Sprint(v)
}
