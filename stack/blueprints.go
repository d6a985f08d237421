package stack

import (
	"embed"
	"fmt"
	"io/fs"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"
)

//go:embed blueprints/*.yaml
var blueprintFS embed.FS

// BlueprintInfo names a built-in blueprint.
type BlueprintInfo struct {
	Name        string `json:"name"`
	Description string `json:"description"`
}

// Blueprints lists the built-in blueprints by name. A blueprint is an
// ordinary template: users save, edit and apply it.
func Blueprints() []BlueprintInfo {
	entries, _ := fs.ReadDir(blueprintFS, "blueprints")
	out := make([]BlueprintInfo, 0, len(entries))
	for _, e := range entries {
		name := strings.TrimSuffix(e.Name(), ".yaml")
		src, _ := blueprintFS.ReadFile("blueprints/" + e.Name())
		var head struct {
			Description string `yaml:"description"`
		}
		_ = yaml.Unmarshal(src, &head)
		out = append(out, BlueprintInfo{Name: name, Description: head.Description})
	}
	slices.SortFunc(out, func(a, b BlueprintInfo) int { return strings.Compare(a.Name, b.Name) })
	return out
}

// Blueprint returns a built-in blueprint's source; an unknown name is an
// error listing the names.
func Blueprint(name string) ([]byte, error) {
	src, err := blueprintFS.ReadFile("blueprints/" + name + ".yaml")
	if err != nil || strings.ContainsAny(name, "/.") {
		var names []string
		for _, b := range Blueprints() {
			names = append(names, b.Name)
		}
		return nil, fmt.Errorf("stack: no blueprint %q; the blueprints are %s", name, strings.Join(names, ", "))
	}
	return src, nil
}
