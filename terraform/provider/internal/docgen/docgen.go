// Package docgen writes the provider's documentation pages in the
// registry's layout (index.md, resources/NAME.md, data-sources/NAME.md)
// from the provider's own schemas, as Terraform receives them over the
// plugin protocol (GetProviderSchema), and from its examples directory
// (provider/provider.tf, resources/NAME/resource.tf and import.sh,
// data-sources/NAME/data-source.tf). The descriptions are the schemas':
// a page is only as good as they are, and Generate refuses an attribute,
// block, resource or data source without one, or one without its example.
//
// `go run ./terraform/provider/cmd/docgen` writes the pages into
// terraform/provider/docs; TestDocs fails when the committed pages differ.
package docgen

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/hashicorp/terraform-plugin-framework/provider"
	"github.com/hashicorp/terraform-plugin-framework/providerserver"
	"github.com/hashicorp/terraform-plugin-go/tfprotov6"
	"github.com/hashicorp/terraform-plugin-go/tftypes"
)

// Command is what regenerates the pages, from the repository's root.
const Command = "go run ./terraform/provider/cmd/docgen"

// Generate answers the pages of prov (named name, e.g. "gpucloud"), each
// by its path under the docs directory, with the examples read from
// examplesDir. It fails, listing every gap, when a description or an
// example is missing.
func Generate(ctx context.Context, name string, prov provider.Provider, examplesDir string) (map[string][]byte, error) {
	srv := providerserver.NewProtocol6(prov)()
	resp, err := srv.GetProviderSchema(ctx, &tfprotov6.GetProviderSchemaRequest{})
	if err != nil {
		return nil, err
	}
	g := &gen{name: name, examples: examplesDir}
	for _, d := range resp.Diagnostics {
		if d.Severity == tfprotov6.DiagnosticSeverityError {
			g.gaps = append(g.gaps, "schema: "+d.Summary+": "+d.Detail)
		}
	}
	pages := map[string][]byte{}
	pages["index.md"] = g.index(resp)
	for _, typ := range slices.Sorted(maps.Keys(resp.ResourceSchemas)) {
		pages["resources/"+strings.TrimPrefix(typ, name+"_")+".md"] = g.page(typ, "Resource", resp.ResourceSchemas[typ])
	}
	for _, typ := range slices.Sorted(maps.Keys(resp.DataSourceSchemas)) {
		pages["data-sources/"+strings.TrimPrefix(typ, name+"_")+".md"] = g.page(typ, "Data Source", resp.DataSourceSchemas[typ])
	}
	if len(g.gaps) > 0 {
		return nil, fmt.Errorf("the provider's documentation has gaps:\n  %s", strings.Join(g.gaps, "\n  "))
	}
	return pages, nil
}

// gen is one run of Generate: the gaps it found so far.
type gen struct {
	name     string
	examples string
	gaps     []string
}

// example is an example file's text, trimmed; a gap when it is missing.
func (g *gen) example(rel string, required bool) string {
	b, err := os.ReadFile(filepath.Join(g.examples, rel))
	if err != nil {
		if required || !os.IsNotExist(err) {
			g.gaps = append(g.gaps, "example "+filepath.ToSlash(filepath.Join("examples", rel))+": "+err.Error())
		}
		return ""
	}
	return strings.TrimSpace(string(b))
}

func (g *gen) index(resp *tfprotov6.GetProviderSchemaResponse) []byte {
	var b bytes.Buffer
	desc := ""
	if resp.Provider != nil && resp.Provider.Block != nil {
		desc = resp.Provider.Block.Description
	}
	if desc == "" {
		g.gaps = append(g.gaps, "provider: no description")
	}
	frontMatter(&b, g.name+" Provider", desc)
	fmt.Fprintf(&b, "# %s Provider\n\n%s\n\n", g.name, desc)
	fmt.Fprintf(&b, "## Example Usage\n\n```terraform\n%s\n```\n\n", g.example("provider/provider.tf", true))
	if resp.Provider != nil {
		b.WriteString("## Schema\n\n")
		g.block(&b, "provider", resp.Provider.Block)
	}
	fmt.Fprintf(&b, "## Resources\n\n")
	for _, typ := range slices.Sorted(maps.Keys(resp.ResourceSchemas)) {
		fmt.Fprintf(&b, "- [`%s`](resources/%s.md)\n", typ, strings.TrimPrefix(typ, g.name+"_"))
	}
	fmt.Fprintf(&b, "\n## Data Sources\n\n")
	for _, typ := range slices.Sorted(maps.Keys(resp.DataSourceSchemas)) {
		fmt.Fprintf(&b, "- [`%s`](data-sources/%s.md)\n", typ, strings.TrimPrefix(typ, g.name+"_"))
	}
	return b.Bytes()
}

// frontMatter is the registry's YAML header of a page.
func frontMatter(b *bytes.Buffer, title, desc string) {
	fmt.Fprintf(b, "---\npage_title: %q\nsubcategory: \"\"\ndescription: |-\n", title)
	for _, line := range strings.Split(firstSentence(desc), "\n") {
		fmt.Fprintf(b, "  %s\n", line)
	}
	b.WriteString("---\n\n")
}

// firstSentence is a description's first sentence (the whole of a short
// one), for the front matter.
func firstSentence(s string) string {
	if i := strings.Index(s, ". "); i >= 0 {
		return s[:i+1]
	}
	return s
}

// page is a resource's or data source's page.
func (g *gen) page(typ, kind string, s *tfprotov6.Schema) []byte {
	var b bytes.Buffer
	desc := ""
	if s != nil && s.Block != nil {
		desc = s.Block.Description
	}
	if desc == "" {
		g.gaps = append(g.gaps, typ+": no description")
	}
	frontMatter(&b, typ+" "+kind+" - "+g.name, desc)
	fmt.Fprintf(&b, "# %s (%s)\n\n%s\n\n", typ, kind, desc)
	dir, file := "resources", "resource.tf"
	if kind == "Data Source" {
		dir, file = "data-sources", "data-source.tf"
	}
	fmt.Fprintf(&b, "## Example Usage\n\n```terraform\n%s\n```\n\n", g.example(filepath.Join(dir, typ, file), true))
	b.WriteString("## Schema\n\n")
	if s != nil {
		g.block(&b, typ, s.Block)
	}
	if kind == "Resource" {
		fmt.Fprintf(&b, "## Import\n\nImport is supported using the following syntax:\n\n```shell\n%s\n```\n", g.example(filepath.Join(dir, typ, "import.sh"), true))
	}
	return append(bytes.TrimRight(b.Bytes(), "\n"), '\n')
}

// nested is a nested block or attribute whose own section follows the
// block's.
type nested struct {
	anchor, path string
	block        *tfprotov6.SchemaBlock
	attrs        []*tfprotov6.SchemaAttribute // a nested attribute's, when block is nil
	objectTypes  map[string]tftypes.Type      // an object-typed attribute's, when both are nil
}

// block writes a block's arguments and attributes, grouped as Required,
// Optional and Read-Only, then a section for each nested block and
// nested attribute. where names the block in the gaps.
func (g *gen) block(b *bytes.Buffer, where string, blk *tfprotov6.SchemaBlock) {
	g.section(b, where, "", blk.Attributes, blk.BlockTypes)
}

// section writes the attributes and blocks of a block, or of a nested
// block or attribute when anchorPrefix is not empty (whose groups are
// titled as text, not as headings).

func (g *gen) section(b *bytes.Buffer, where, anchorPrefix string, attrs []*tfprotov6.SchemaAttribute, blocks []*tfprotov6.SchemaNestedBlock) {
	type entry struct {
		name, line string
		group      int // 0 required, 1 optional, 2 read-only
	}
	var entries []entry
	var more []nested
	for _, a := range attrs {
		if a.Description == "" {
			g.gaps = append(g.gaps, where+"."+a.Name+": no description")
		}
		group := 1
		switch {
		case a.Required:
			group = 0
		case a.Computed && !a.Optional:
			group = 2
		}
		typ := typeName(a)
		line := fmt.Sprintf("- `%s` (%s", a.Name, typ)
		if a.Sensitive {
			line += ", Sensitive"
		}
		if a.Deprecated {
			line += ", Deprecated"
		}
		line += ") " + a.Description
		anchor := anchorPrefix + a.Name
		switch {
		case a.NestedType != nil:
			line += fmt.Sprintf(" (see [below for nested schema](#nestedatt--%s))", anchor)
			more = append(more, nested{anchor: "nestedatt--" + anchor, path: anchor, attrs: a.NestedType.Attributes})
		case objectOf(a.Type) != nil:
			line += fmt.Sprintf(" (see [below for nested schema](#nestedobjatt--%s))", anchor)
			more = append(more, nested{anchor: "nestedobjatt--" + anchor, path: anchor, objectTypes: objectOf(a.Type).AttributeTypes})
		}
		entries = append(entries, entry{a.Name, strings.TrimSpace(line), group})
	}
	for _, nb := range blocks {
		desc := ""
		if nb.Block != nil {
			desc = nb.Block.Description
		}
		if desc == "" {
			g.gaps = append(g.gaps, where+"."+nb.TypeName+": no description")
		}
		group := 1
		if nb.MinItems > 0 {
			group = 0
		}
		anchor := anchorPrefix + nb.TypeName
		line := fmt.Sprintf("- `%s` (%s) %s (see [below for nested schema](#nestedblock--%s))", nb.TypeName, blockType(nb), desc, anchor)
		entries = append(entries, entry{nb.TypeName, line, group})
		more = append(more, nested{anchor: "nestedblock--" + anchor, path: anchor, block: nb.Block})
	}
	sort.SliceStable(entries, func(i, j int) bool { return entries[i].name < entries[j].name })
	for gi, title := range []string{"Required", "Optional", "Read-Only"} {
		first := true
		for _, e := range entries {
			if e.group != gi {
				continue
			}
			if first && anchorPrefix == "" {
				fmt.Fprintf(b, "### %s\n\n", title)
				first = false
			} else if first {
				fmt.Fprintf(b, "%s:\n\n", title)
				first = false
			}
			b.WriteString(e.line + "\n")
		}
		if !first {
			b.WriteString("\n")
		}
	}
	for _, n := range more {
		fmt.Fprintf(b, "<a id=%q></a>\n### Nested Schema for `%s`\n\n", n.anchor, strings.ReplaceAll(n.path, "--", "."))
		switch {
		case n.block != nil:
			g.section(b, where+"."+n.path, n.path+"--", n.block.Attributes, n.block.BlockTypes)
		case n.attrs != nil:
			g.section(b, where+"."+n.path, n.path+"--", n.attrs, nil)
		default:
			b.WriteString("Read-Only:\n\n")
			for _, k := range slices.Sorted(maps.Keys(n.objectTypes)) {
				fmt.Fprintf(b, "- `%s` (%s)\n", k, tfType(n.objectTypes[k]))
			}
			b.WriteString("\n")
		}
	}
}

// objectOf is the object type of an attribute of an object type, or a
// collection of one; nil for any other.
func objectOf(t tftypes.Type) *tftypes.Object {
	switch t := t.(type) {
	case tftypes.Object:
		return &t
	case tftypes.List:
		return objectOf(t.ElementType)
	case tftypes.Set:
		return objectOf(t.ElementType)
	case tftypes.Map:
		return objectOf(t.ElementType)
	}
	return nil
}

// typeName is how a page names an attribute's type.
func typeName(a *tfprotov6.SchemaAttribute) string {
	if a.NestedType != nil {
		switch a.NestedType.Nesting {
		case tfprotov6.SchemaObjectNestingModeList:
			return "Attributes List"
		case tfprotov6.SchemaObjectNestingModeSet:
			return "Attributes Set"
		case tfprotov6.SchemaObjectNestingModeMap:
			return "Attributes Map"
		default:
			return "Attributes"
		}
	}
	return tfType(a.Type)
}

// tfType names a type as the registry's pages do: String, Number, Bool,
// List of String, Map of Number, Object.
func tfType(t tftypes.Type) string {
	switch t := t.(type) {
	case tftypes.List:
		return "List of " + tfType(t.ElementType)
	case tftypes.Set:
		return "Set of " + tfType(t.ElementType)
	case tftypes.Map:
		return "Map of " + tfType(t.ElementType)
	case tftypes.Object:
		return "Object"
	case tftypes.Tuple:
		return "Tuple"
	}
	switch {
	case t == nil:
		return "Unknown"
	case t.Is(tftypes.String):
		return "String"
	case t.Is(tftypes.Number):
		return "Number"
	case t.Is(tftypes.Bool):
		return "Bool"
	case t.Is(tftypes.DynamicPseudoType):
		return "Dynamic"
	}
	return t.String()
}

// blockType names a nested block's kind and bounds.
func blockType(nb *tfprotov6.SchemaNestedBlock) string {
	var s string
	switch nb.Nesting {
	case tfprotov6.SchemaNestedBlockNestingModeList:
		s = "Block List"
	case tfprotov6.SchemaNestedBlockNestingModeSet:
		s = "Block Set"
	default:
		s = "Block"
	}
	if nb.MinItems > 0 {
		s += fmt.Sprintf(", Min: %d", nb.MinItems)
	}
	if nb.MaxItems > 0 {
		s += fmt.Sprintf(", Max: %d", nb.MaxItems)
	}
	return s
}

// Write replaces the pages under dir with pages: it writes every page
// and removes any other .md file under index.md, resources/ and
// data-sources/ (a page of a type the provider no longer has).
func Write(dir string, pages map[string][]byte) error {
	for _, sub := range []string{"resources", "data-sources"} {
		old, _ := filepath.Glob(filepath.Join(dir, sub, "*.md"))
		for _, f := range old {
			rel, _ := filepath.Rel(dir, f)
			if _, ok := pages[filepath.ToSlash(rel)]; !ok {
				if err := os.Remove(f); err != nil {
					return err
				}
			}
		}
	}
	for rel, b := range pages {
		p := filepath.Join(dir, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, b, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// Diff lists how the pages under dir differ from pages: a page missing,
// different, or there and not generated.
func Diff(dir string, pages map[string][]byte) []string {
	var diffs []string
	for _, rel := range slices.Sorted(maps.Keys(pages)) {
		b, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(rel)))
		switch {
		case err != nil:
			diffs = append(diffs, rel+": "+err.Error())
		case !bytes.Equal(b, pages[rel]):
			diffs = append(diffs, rel+": differs from what the generator writes"+firstDifference(b, pages[rel]))
		}
	}
	var extra []string
	for _, sub := range []string{"*.md", "resources/*.md", "data-sources/*.md"} {
		found, _ := filepath.Glob(filepath.Join(dir, sub))
		extra = append(extra, found...)
	}
	for _, f := range extra {
		rel, _ := filepath.Rel(dir, f)
		if _, ok := pages[filepath.ToSlash(rel)]; !ok {
			diffs = append(diffs, filepath.ToSlash(rel)+": not a page the generator writes")
		}
	}
	return diffs
}

// firstDifference says where two pages first differ, by line.
func firstDifference(have, want []byte) string {
	h, w := strings.Split(string(have), "\n"), strings.Split(string(want), "\n")
	for i := 0; i < len(h) || i < len(w); i++ {
		var hl, wl string
		if i < len(h) {
			hl = h[i]
		}
		if i < len(w) {
			wl = w[i]
		}
		if hl != wl {
			return fmt.Sprintf(" (line %d: committed %q, generated %q)", i+1, hl, wl)
		}
	}
	return ""
}
