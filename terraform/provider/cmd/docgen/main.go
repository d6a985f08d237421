// Command docgen writes the Terraform provider's documentation pages
// (terraform/provider/docs, the registry's layout) from its schemas and
// its examples (terraform/provider/examples). Run it from the
// repository's root after changing a schema's description or an example:
//
//	go run ./terraform/provider/cmd/docgen
//
// TestDocs (terraform/provider/internal/docgen) fails while the committed
// pages differ from what it writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"

	"github.com/gpucloud/gpucloud/terraform/provider"
	"github.com/gpucloud/gpucloud/terraform/provider/internal/docgen"
)

func main() {
	docs := flag.String("docs", "terraform/provider/docs", "the directory the pages are written to")
	examples := flag.String("examples", "terraform/provider/examples", "the directory of the examples the pages include")
	flag.Parse()
	if _, err := os.Stat(*examples); err != nil {
		fmt.Fprintf(os.Stderr, "docgen: %v (run it from the repository's root)\n", err)
		os.Exit(1)
	}
	pages, err := docgen.Generate(context.Background(), "gpucloud", provider.New("docs")(), *examples)
	if err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
	if err := docgen.Write(*docs, pages); err != nil {
		fmt.Fprintln(os.Stderr, "docgen:", err)
		os.Exit(1)
	}
	fmt.Printf("docgen: wrote %d pages under %s\n", len(pages), *docs)
}
