package servercmd

import (
	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/controlplane"
)

// CatalogFlag names an operator catalog file (docs/CATALOG.md) that the
// server sells from: the built-in catalog extended (or replaced) by it.
type CatalogFlag struct {
	file string
	// Catalog is what Apply loaded: the built-in one without the flag.
	Catalog *catalog.Catalog
}

// Register adds --catalog to cmd.
func (f *CatalogFlag) Register(cmd *cobra.Command, what string) {
	cmd.Flags().StringVar(&f.file, "catalog", "", "an operator catalog file (YAML, docs/CATALOG.md) that extends the built-in catalog, "+
		"or replaces it if it sets replace_builtin: "+what+"; check it first with gpucloud catalog validate")
}

// Load reads the file into f.Catalog; a file that does not load is a
// usage error naming it and what is wrong (with its line).
func (f *CatalogFlag) Load(cmd *cobra.Command) error {
	if f.file == "" {
		f.Catalog = catalog.Default()
		return nil
	}
	c, err := catalog.LoadFile(f.file)
	if err != nil {
		return cmdutil.Usagef(cmd, "--catalog %s: %v", f.file, err)
	}
	f.Catalog = c
	return nil
}

// Apply loads the file into cfg.Catalog.
func (f *CatalogFlag) Apply(cmd *cobra.Command, cfg *controlplane.Config) error {
	if err := f.Load(cmd); err != nil {
		return err
	}
	cfg.Catalog = f.Catalog
	return nil
}
