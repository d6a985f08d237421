package stack

import (
	"encoding/json"
	"reflect"
	"slices"
)

// UnknownValue is the type of Unknown.
type UnknownValue struct{}

// Unknown stands for a value that is known only after apply: an attribute
// of a copy that is to be created or replaced. ResolvePartial puts it
// where such a value goes, and a plan shows it as "(known after apply)".
var Unknown = UnknownValue{}

// String is "(known after apply)".
func (UnknownValue) String() string { return "(known after apply)" }

// MarshalJSON writes the string "(known after apply)".
func (u UnknownValue) MarshalJSON() ([]byte, error) { return json.Marshal(u.String()) }

// IsUnknown reports whether v is Unknown or holds it anywhere.
func IsUnknown(v any) bool {
	switch x := v.(type) {
	case UnknownValue:
		return true
	case []any:
		return slices.ContainsFunc(x, IsUnknown)
	case map[string]any:
		for _, e := range x {
			if IsUnknown(e) {
				return true
			}
		}
	}
	return false
}

// Equal compares two values semantically: numbers by value whatever their
// Go type (1 equals 1.0), maps by their entries whatever the key order,
// a nil entry as an absent one, and slices and maps of any element type
// by their elements. Unknown equals nothing, itself included.
func Equal(a, b any) bool {
	return equalCanon(canon(a), canon(b))
}

// canon converts a value to nil, bool, string, a number (int64 or
// float64), []any or map[string]any, or leaves it as it is.
func canon(v any) any {
	switch x := v.(type) {
	case nil, bool, string, int64, float64, []any, map[string]any, UnknownValue:
		return v
	case int:
		return int64(x)
	case int32:
		return int64(x)
	case uint32:
		return int64(x)
	case float32:
		return float64(x)
	case json.Number:
		if i, err := x.Int64(); err == nil {
			return i
		}
		if f, err := x.Float64(); err == nil {
			return f
		}
		return x.String()
	}
	rv := reflect.ValueOf(v)
	switch rv.Kind() {
	case reflect.Slice, reflect.Array:
		if rv.Kind() == reflect.Slice && rv.IsNil() {
			return nil
		}
		out := make([]any, rv.Len())
		for i := range out {
			out[i] = rv.Index(i).Interface()
		}
		return out
	case reflect.Map:
		if rv.Type().Key().Kind() != reflect.String {
			return v
		}
		out := make(map[string]any, rv.Len())
		for it := rv.MapRange(); it.Next(); {
			out[it.Key().String()] = it.Value().Interface()
		}
		return out
	case reflect.String:
		return rv.String()
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int64:
		return rv.Int()
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint64:
		return float64(rv.Uint())
	case reflect.Bool:
		return rv.Bool()
	case reflect.Pointer:
		if rv.IsNil() {
			return nil
		}
		return canon(rv.Elem().Interface())
	}
	return v
}

// equalCanon compares canonical values.
func equalCanon(a, b any) bool {
	switch x := a.(type) {
	case UnknownValue:
		return false
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		}
		return false
	case float64:
		switch y := b.(type) {
		case int64:
			return x == float64(y)
		case float64:
			return x == y
		}
		return false
	case []any:
		y, ok := b.([]any)
		if !ok || len(x) != len(y) {
			return false
		}
		for i := range x {
			if !Equal(x[i], y[i]) {
				return false
			}
		}
		return true
	case map[string]any:
		y, ok := b.(map[string]any)
		if !ok {
			return false
		}
		return equalMaps(x, y)
	}
	if _, ok := b.(UnknownValue); ok {
		return false
	}
	return reflect.DeepEqual(a, b)
}

// equalMaps compares maps entry by entry, nil entries as absent ones.
func equalMaps(x, y map[string]any) bool {
	for k, v := range x {
		if !Equal(v, y[k]) {
			return false
		}
	}
	for k, v := range y {
		if _, ok := x[k]; !ok && v != nil {
			return false
		}
	}
	return true
}

// FieldDiff is one field whose value differs: in a plan, Old is the value
// as applied (or as live, for drift) and New the template's; in Live,
// Old is the value as applied and New the live one. Path is dotted,
// "properties.desired" or "properties.env.MODEL".
type FieldDiff struct {
	Path string `json:"path"`
	Old  any    `json:"old,omitempty"`
	New  any    `json:"new,omitempty"`
}

// diffValues lists the differences between old and new under path,
// descending into maps on both sides; other values differ as a whole.
func diffValues(path string, old, new any) []FieldDiff {
	om, ok1 := canon(old).(map[string]any)
	nm, ok2 := canon(new).(map[string]any)
	if !ok1 || !ok2 {
		if Equal(old, new) {
			return nil
		}
		return []FieldDiff{{Path: path, Old: old, New: new}}
	}
	var out []FieldDiff
	for _, k := range unionKeys(om, nm) {
		out = append(out, diffValues(path+"."+k, om[k], nm[k])...)
	}
	return out
}

// unionKeys returns the keys of both maps, sorted.
func unionKeys(a, b map[string]any) []string {
	keys := make([]string, 0, len(a)+len(b))
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}
