package docgen_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hashicorp/terraform-plugin-framework/datasource"
	"github.com/hashicorp/terraform-plugin-framework/provider"
	pschema "github.com/hashicorp/terraform-plugin-framework/provider/schema"
	"github.com/hashicorp/terraform-plugin-framework/resource"
	"github.com/hashicorp/terraform-plugin-framework/resource/schema"
	"github.com/hashicorp/terraform-plugin-framework/types"

	gpucloud "github.com/gpucloud/gpucloud/terraform/provider"
	"github.com/gpucloud/gpucloud/terraform/provider/internal/docgen"
)

// TestDocs fails while the committed pages under terraform/provider/docs
// differ from what the generator makes of the provider's schemas and
// examples, and says how to make them again.
func TestDocs(t *testing.T) {
	pages, err := docgen.Generate(t.Context(), "gpucloud", gpucloud.New("docs")(), "../../examples")
	if err != nil {
		t.Fatal(err)
	}
	if diffs := docgen.Diff("../../docs", pages); len(diffs) > 0 {
		t.Errorf("terraform/provider/docs is not what the generator writes: run `%s` from the repository's root and commit the result.\n  %s",
			docgen.Command, strings.Join(diffs, "\n  "))
	}
	// What the pages must say, whatever the wording around it.
	for page, want := range map[string][]string{
		"resources/commitment.md":   {"CANNOT BE DESTROYED BEFORE ITS TERM ENDS", "removed {"},
		"resources/group.md":        {"### Nested Schema for `timing`", "`max_spot_price_ratio` (Number)", "terraform import gpucloud_group."},
		"index.md":                  {"`token` (String, Sensitive)", "[`gpucloud_endpoint`](resources/endpoint.md)", "[`gpucloud_advise`](data-sources/advise.md)"},
		"data-sources/offerings.md": {"### Nested Schema for `offerings`", "Read-Only:"},
	} {
		for _, w := range want {
			if !strings.Contains(string(pages[page]), w) {
				t.Errorf("%s does not say %q", page, w)
			}
		}
	}
}

// fake is a provider with one resource and one data source, whose
// descriptions and examples the tests leave out one at a time.
type fake struct{ noResourceDesc, noAttrDesc bool }

func (f fake) Metadata(_ context.Context, _ provider.MetadataRequest, resp *provider.MetadataResponse) {
	resp.TypeName = "fake"
}

func (f fake) Schema(_ context.Context, _ provider.SchemaRequest, resp *provider.SchemaResponse) {
	resp.Schema = pschema.Schema{Description: "A fake.", Attributes: map[string]pschema.Attribute{
		"secret": pschema.StringAttribute{Optional: true, Sensitive: true, Description: "A secret."}}}
}

func (f fake) Configure(context.Context, provider.ConfigureRequest, *provider.ConfigureResponse) {}

func (f fake) Resources(context.Context) []func() resource.Resource {
	return []func() resource.Resource{func() resource.Resource { return thing(f) }}
}

func (f fake) DataSources(context.Context) []func() datasource.DataSource { return nil }

type thing fake

func (thing) Metadata(_ context.Context, req resource.MetadataRequest, resp *resource.MetadataResponse) {
	resp.TypeName = req.ProviderTypeName + "_thing"
}

func (r thing) Schema(_ context.Context, _ resource.SchemaRequest, resp *resource.SchemaResponse) {
	desc, attrDesc := "A thing. It has parts.", "How big."
	if r.noResourceDesc {
		desc = ""
	}
	if r.noAttrDesc {
		attrDesc = ""
	}
	resp.Schema = schema.Schema{Description: desc,
		Attributes: map[string]schema.Attribute{
			"id":    schema.StringAttribute{Computed: true, Description: "Its ID."},
			"size":  schema.Int64Attribute{Required: true, Description: attrDesc},
			"names": schema.ListAttribute{Optional: true, ElementType: types.StringType, Description: "Names."},
		},
		Blocks: map[string]schema.Block{
			"part": schema.ListNestedBlock{Description: "A part.", NestedObject: schema.NestedBlockObject{
				Attributes: map[string]schema.Attribute{"weight": schema.Float64Attribute{Optional: true, Description: "Its weight."}}}},
		},
	}
}

func (thing) Create(context.Context, resource.CreateRequest, *resource.CreateResponse) {}
func (thing) Read(context.Context, resource.ReadRequest, *resource.ReadResponse)       {}
func (thing) Update(context.Context, resource.UpdateRequest, *resource.UpdateResponse) {}
func (thing) Delete(context.Context, resource.DeleteRequest, *resource.DeleteResponse) {}

// writeExamples makes an examples directory for the fake, without the
// files named in leave.
func writeExamples(t *testing.T, leave ...string) string {
	t.Helper()
	dir := t.TempDir()
	for rel, body := range map[string]string{
		"provider/provider.tf":             `provider "fake" {}`,
		"resources/fake_thing/resource.tf": `resource "fake_thing" "t" { size = 1 }`,
		"resources/fake_thing/import.sh":   "terraform import fake_thing.t t-1",
	} {
		if strings.Contains(strings.Join(leave, " "), rel) {
			continue
		}
		p := filepath.Join(dir, rel)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestGenerateGaps: a missing description or example is an error that
// names it; none missing, the page has the parts the registry shows.
func TestGenerateGaps(t *testing.T) {
	for _, tc := range []struct {
		name  string
		prov  fake
		leave []string
		want  string
	}{
		{"resource description", fake{noResourceDesc: true}, nil, "fake_thing: no description"},
		{"attribute description", fake{noAttrDesc: true}, nil, "fake_thing.size: no description"},
		{"resource example", fake{}, []string{"resources/fake_thing/resource.tf"}, "example examples/resources/fake_thing/resource.tf"},
		{"import example", fake{}, []string{"resources/fake_thing/import.sh"}, "example examples/resources/fake_thing/import.sh"},
		{"provider example", fake{}, []string{"provider/provider.tf"}, "example examples/provider/provider.tf"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := docgen.Generate(t.Context(), "fake", tc.prov, writeExamples(t, tc.leave...))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Generate: %v, want an error saying %q", err, tc.want)
			}
		})
	}
	pages, err := docgen.Generate(t.Context(), "fake", fake{}, writeExamples(t))
	if err != nil {
		t.Fatal(err)
	}
	page := string(pages["resources/thing.md"])
	for _, want := range []string{
		"page_title: \"fake_thing Resource - fake\"\nsubcategory: \"\"\ndescription: |-\n  A thing.\n---\n",
		"# fake_thing (Resource)\n\nA thing. It has parts.\n",
		"```terraform\nresource \"fake_thing\" \"t\" { size = 1 }\n```",
		"### Required\n\n- `size` (Number) How big.\n",
		"### Optional\n\n- `names` (List of String) Names.\n- `part` (Block List) A part. (see [below for nested schema](#nestedblock--part))\n",
		"### Read-Only\n\n- `id` (String) Its ID.\n",
		"<a id=\"nestedblock--part\"></a>\n### Nested Schema for `part`\n\nOptional:\n\n- `weight` (Number) Its weight.\n",
		"## Import\n\nImport is supported using the following syntax:\n\n```shell\nterraform import fake_thing.t t-1\n```\n",
	} {
		if !strings.Contains(page, want) {
			t.Errorf("resources/thing.md lacks %q:\n%s", want, page)
		}
	}
	if !strings.Contains(string(pages["index.md"]), "- `secret` (String, Sensitive) A secret.") {
		t.Errorf("index.md:\n%s", pages["index.md"])
	}
	// Write then Diff: no difference; a page changed or left over is one.
	dir := t.TempDir()
	if err := docgen.Write(dir, pages); err != nil {
		t.Fatal(err)
	}
	if d := docgen.Diff(dir, pages); len(d) != 0 {
		t.Fatalf("Diff after Write: %v", d)
	}
	os.WriteFile(filepath.Join(dir, "resources", "thing.md"), []byte("old"), 0o644)
	os.WriteFile(filepath.Join(dir, "resources", "gone.md"), []byte("old"), 0o644)
	d := strings.Join(docgen.Diff(dir, pages), "\n")
	if !strings.Contains(d, "resources/thing.md: differs") || !strings.Contains(d, "resources/gone.md: not a page the generator writes") {
		t.Fatalf("Diff: %s", d)
	}
	if err := docgen.Write(dir, pages); err != nil {
		t.Fatal(err)
	}
	if d := docgen.Diff(dir, pages); len(d) != 0 {
		t.Fatalf("Diff after a second Write: %v", d)
	}
}
