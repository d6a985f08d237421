package cli

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"github.com/spf13/cobra"
	"gopkg.in/yaml.v3"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
)

// offeringModes are the values of --mode, in the order the docs list them.
var offeringModes = []catalog.Mode{catalog.ModeMetal, catalog.ModeGPU, catalog.ModeMIG, catalog.ModeShared, catalog.ModeCPU, catalog.ModePartition, catalog.ModeVF}

func newCatalogCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "catalog",
		Short: "Show and check the GPU catalog: models, MIG profiles, offerings",
		Long: "Show the catalog gpucloud places and bills against: the GPU models with their\n" +
			"specs, the MIG profile table of each MIG-capable model, and the offerings\n" +
			"(instance types) tenants rent.\n\n" +
			"The built-in catalog can be extended or replaced by an operator catalog file\n" +
			"(YAML). Pass it with --catalog to preview the result, and check it with\n" +
			"'gpucloud catalog validate FILE'. See docs/CATALOG.md for the file format.",
		Example: strings.Join([]string{
			"  gpucloud catalog models",
			"  gpucloud catalog profiles H100",
			"  gpucloud catalog offerings --mode mig",
			"  gpucloud catalog validate catalog.yaml",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			return cmd.Help()
		},
	}
	cmd.AddCommand(newCatalogModelsCommand(), newCatalogProfilesCommand(), newCatalogOfferingsCommand(), newCatalogValidateCommand())
	return cmd
}

// catalogFlags are the flags shared by the listing subcommands.
type catalogFlags struct {
	file   string
	output string
}

func (f *catalogFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.file, "catalog", "", "apply this operator catalog file (YAML): it extends the built-in catalog, or replaces it if it sets replace_builtin")
	cmd.Flags().StringVarP(&f.output, "output", "o", "table", `output format: "table", "json" or "yaml"`)
	_ = cmd.MarkFlagFilename("catalog", "yaml", "yml")
	_ = cmd.RegisterFlagCompletionFunc("output", cobra.FixedCompletions(outputFormats, cobra.ShellCompDirectiveNoFileComp))
}

// validate checks the output format; its error is a usage error.
func (f *catalogFlags) validate(cmd *cobra.Command) error {
	for _, v := range outputFormats {
		if f.output == v {
			return nil
		}
	}
	return cmdutil.Usagef(cmd, `--output %q: want "table", "json" or "yaml"`, f.output)
}

// load returns the built-in catalog, or the result of the --catalog file.
func (f *catalogFlags) load() (*catalog.Catalog, error) {
	if f.file == "" {
		return catalog.Default(), nil
	}
	return catalog.LoadFile(f.file)
}

// --- catalog models ---

func newCatalogModelsCommand() *cobra.Command {
	var f catalogFlags
	cmd := &cobra.Command{
		Use:   "models",
		Short: "List the GPU models",
		Long: "List the GPU models of the catalog, sorted by name: GPU memory, NVLink\n" +
			"bandwidth class per GPU (\"-\" for PCIe-only parts), whether the model supports\n" +
			"MIG, the PCI device id (vendor 0x10DE) the agent matches inventory against\n" +
			"(\"-\" when unknown), and the aliases accepted wherever a model is named.\n\n" +
			"-o json and -o yaml print the models as a list, MIG tables included.",
		Example: strings.Join([]string{
			"  # The built-in models",
			"  gpucloud catalog models",
			"",
			"  # Preview the models with an operator catalog file applied",
			"  gpucloud catalog models --catalog /etc/gpucloud/catalog.yaml",
			"",
			"  # Everything about every model, MIG profiles included",
			"  gpucloud catalog models -o json",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			c, err := f.load()
			if err != nil {
				return err
			}
			models := c.Models()
			if f.output != "table" {
				return writeList(cmd.OutOrStdout(), f.output, models)
			}
			rows := [][]string{{"NAME", "MEMORY", "NVLINK", "MIG", "PCI ID", "ALIASES"}}
			for _, m := range models {
				nvlink, mig, pci := "-", "no", "-"
				if m.NVLinkGBps > 0 {
					nvlink = strconv.Itoa(m.NVLinkGBps) + " GB/s"
				}
				if m.XGMIGBps > 0 {
					// AMD's Infinity Fabric, the NVLink of its 8-GPU platforms.
					nvlink = strconv.Itoa(m.XGMIGBps) + " GB/s xGMI"
				}
				if m.SupportsMIG() {
					mig = "yes"
				}
				if m.PCIDeviceID != 0 {
					pci = fmt.Sprintf("0x%04X", m.PCIDeviceID)
				}
				rows = append(rows, []string{m.Name, formatMiB(m.MemoryMiB), nvlink, mig, pci, dash(strings.Join(m.Aliases, ", "))})
			}
			return writeTable(cmd.OutOrStdout(), rows)
		},
	}
	f.register(cmd)
	return cmd
}

// --- catalog profiles ---

func newCatalogProfilesCommand() *cobra.Command {
	var f catalogFlags
	cmd := &cobra.Command{
		Use:   "profiles MODEL",
		Short: "Show the MIG profile table of a GPU model",
		Long: "Show the MIG profile table of a GPU model (by name or alias), as\n" +
			"'nvidia-smi mig -lgip' lists it, smallest profile first: the GPU instance\n" +
			"profile ID, the model-specific name, the compute slices (of 7) and memory\n" +
			"slots (of 8) an instance takes, how many instances of it one GPU holds, the\n" +
			"memory slots an instance may start at (it occupies start..start+slots-1),\n" +
			"and the nominal memory used for pricing and placement.\n\n" +
			"A model without MIG is an error that lists the MIG-capable models.",
		Example: strings.Join([]string{
			"  gpucloud catalog profiles H100-80GB-SXM",
			"",
			"  # Aliases work too",
			"  gpucloud catalog profiles h200",
			"",
			"  # The profiles of a model defined in an operator catalog file",
			"  gpucloud catalog profiles MYCARD --catalog catalog.yaml -o yaml",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cmdutil.Usagef(cmd, "%s takes one MODEL argument, got %d", cmd.CommandPath(), len(args))
			}
			return nil
		},
		ValidArgsFunction: func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
			if len(args) > 0 {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			c, err := f.load()
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			return migModelNames(c), cobra.ShellCompDirectiveNoFileComp
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			c, err := f.load()
			if err != nil {
				return err
			}
			m, err := c.Model(args[0])
			if err != nil {
				return err
			}
			if m.SupportsPartitions() {
				return writePartitions(cmd.OutOrStdout(), f.output, m)
			}
			if !m.SupportsMIG() {
				capable := migModelNames(c)
				if len(capable) == 0 {
					return fmt.Errorf("gpu model %q does not support MIG, and no model in the catalog does", m.Name)
				}
				return fmt.Errorf("gpu model %q does not support MIG (MIG-capable models: %s)", m.Name, strings.Join(capable, ", "))
			}
			profiles := make([]catalog.MIGProfile, len(m.MIGProfiles))
			copy(profiles, m.MIGProfiles)
			if f.output != "table" {
				return writeList(cmd.OutOrStdout(), f.output, profiles)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "MIG profiles of %s (%s; %d compute slices, %d memory slots)\n\n",
				m.Name, formatMiB(m.MemoryMiB), catalog.MIGComputeSlices, catalog.MIGMemorySlots)
			rows := [][]string{{"ID", "NAME", "SLICES", "MEMORY SLOTS", "MAX/GPU", "STARTS", "MEMORY"}}
			for _, p := range profiles {
				starts := make([]string, len(p.Starts))
				for i, s := range p.Starts {
					starts[i] = strconv.Itoa(s)
				}
				rows = append(rows, []string{strconv.Itoa(p.ID), p.Name, strconv.Itoa(p.ComputeSlices), strconv.Itoa(p.MemorySlots),
					strconv.Itoa(p.MaxPerGPU), strings.Join(starts, ","), formatMiB(p.MemoryMiB)})
			}
			return writeTable(out, rows)
		},
	}
	f.register(cmd)
	return cmd
}

// writePartitions prints an AMD model's partition tables, the analogue of
// a MIG profile table: its compute partition modes with what each logical
// GPU has, the memory modes valid with each, and its VF configurations.
func writePartitions(out io.Writer, format string, m *catalog.Model) error {
	if format != "table" {
		return writeList(out, format, m.Partitions)
	}
	fmt.Fprintf(out, "Compute partitions of %s (%s; %d XCDs, %d CUs)\n\n", m.Name, formatMiB(m.MemoryMiB), m.XCDs, m.ComputeUnits)
	rows := [][]string{{"MODE", "GPUS", "XCDS", "CUS", "MEMORY", "MEMORY MODES"}}
	for _, p := range m.Partitions {
		rows = append(rows, []string{p.Name, strconv.Itoa(p.Devices), strconv.Itoa(p.XCDs), strconv.Itoa(p.ComputeUnits),
			formatMiB(p.MemoryMiB), strings.Join(p.MemoryPartitions, ", ")})
	}
	if err := writeTable(out, rows); err != nil {
		return err
	}
	if len(m.VFConfigs) > 0 {
		var vfs []string
		for _, v := range m.VFConfigs {
			vfs = append(vfs, fmt.Sprintf("%d in %s/%s", v.VFs, v.Partition, v.MemoryPartition))
		}
		fmt.Fprintf(out, "\nSR-IOV virtual functions (MxGPU): %s\n", strings.Join(vfs, ", "))
	}
	return nil
}

// migModelNames lists the canonical names of the MIG-capable models.
func migModelNames(c *catalog.Catalog) []string {
	var names []string
	for _, m := range c.Models() {
		if m.SupportsMIG() {
			names = append(names, m.Name)
		}
	}
	return names
}

// --- catalog offerings ---

func newCatalogOfferingsCommand() *cobra.Command {
	var (
		f     catalogFlags
		mode  string
		model string
	)
	modes := make([]string, len(offeringModes))
	for i, m := range offeringModes {
		modes[i] = string(m)
	}
	cmd := &cobra.Command{
		Use:   "offerings",
		Short: "List the offerings (instance types)",
		Long: "List the offerings tenants rent, sorted by name: the virtualization mode, the\n" +
			"GPU model, what of the GPU it rents (RESOURCE: whole GPUs, a MIG profile, or a\n" +
			"time-sliced share with its GPU memory), the host vCPUs and memory that come\n" +
			"with it, and its instance store (STORE: local scratch disk at /scratch, wiped\n" +
			"when the instance stops, included in the price; \"-\" for none).\n\n" +
			"Modes: metal (a whole host), gpu (1..8 whole GPUs in passthrough), mig (one MIG\n" +
			"instance), shared (a time-sliced fraction of one GPU), cpu (no GPU).\n\n" +
			"-o json and -o yaml print the offerings as a list, descriptions included.",
		Example: strings.Join([]string{
			"  gpucloud catalog offerings",
			"",
			"  # The MIG offerings on H100s (any alias of the model works)",
			"  gpucloud catalog offerings --mode mig --model H100",
			"",
			"  # Preview an operator catalog file's offerings as JSON",
			"  gpucloud catalog offerings --catalog catalog.yaml -o json",
		}, "\n"),
		Args: cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.validate(cmd); err != nil {
				return err
			}
			var wantMode catalog.Mode
			if mode != "" {
				wantMode = catalog.Mode(strings.ToLower(mode))
				if !wantMode.Valid() {
					return cmdutil.Usagef(cmd, "--mode %q: want one of %s", mode, strings.Join(modes, ", "))
				}
			}
			c, err := f.load()
			if err != nil {
				return err
			}
			wantModel := ""
			if model != "" {
				m, err := c.Model(model)
				if err != nil {
					return cmdutil.Usagef(cmd, "--model: %v", err)
				}
				wantModel = m.Name
			}
			offerings := []*catalog.Offering{}
			canonical := map[*catalog.Offering]string{}
			for _, o := range c.Offerings() {
				if o.Model != "" {
					// Offerings may name their model by an alias; the
					// catalog has validated that it resolves.
					if name, err := c.CanonicalModel(o.Model); err == nil {
						canonical[o] = name
					}
				}
				if wantMode != "" && o.Mode != wantMode {
					continue
				}
				if wantModel != "" && canonical[o] != wantModel {
					continue
				}
				offerings = append(offerings, o)
			}
			out := cmd.OutOrStdout()
			if f.output != "table" {
				return writeList(out, f.output, offerings)
			}
			if len(offerings) == 0 {
				fmt.Fprintf(out, "no offerings%s\n", describeFilter(wantMode, wantModel))
				return nil
			}
			rows := [][]string{{"NAME", "MODE", "MODEL", "RESOURCE", "VCPUS", "MEMORY", "STORE"}}
			for _, o := range offerings {
				rows = append(rows, []string{o.Name, string(o.Mode), dash(canonical[o]), offeringResource(o),
					strconv.Itoa(o.VCPUs), formatMiB(o.MemoryMiB), instanceStore(o)})
			}
			return writeTable(out, rows)
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&mode, "mode", "", "only offerings of this mode: "+strings.Join(modes, ", "))
	cmd.Flags().StringVar(&model, "model", "", "only offerings on this GPU model (name or alias)")
	_ = cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions(modes, cobra.ShellCompDirectiveNoFileComp))
	_ = cmd.RegisterFlagCompletionFunc("model", func(cmd *cobra.Command, args []string, toComplete string) ([]string, cobra.ShellCompDirective) {
		c, err := f.load()
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var names []string
		for _, m := range c.Models() {
			names = append(names, m.Name)
		}
		return names, cobra.ShellCompDirectiveNoFileComp
	})
	return cmd
}

// describeFilter says which filters left no offering, e.g.
// " with mode mig on model T4".
func describeFilter(mode catalog.Mode, model string) string {
	var s string
	if mode != "" {
		s += " with mode " + string(mode)
	}
	if model != "" {
		s += " on model " + model
	}
	return s
}

// offeringResource says what of the GPU an offering rents: "8 GPUs",
// "mig 3g.40gb", "0.25 GPU, 12 GiB".
func offeringResource(o *catalog.Offering) string {
	switch o.Mode {
	case catalog.ModeMetal:
		if o.GPUs == 0 {
			return "whole host"
		}
		return gpuCount(o.GPUs)
	case catalog.ModeGPU:
		return gpuCount(o.GPUs)
	case catalog.ModeMIG:
		return "mig " + o.MIGProfile
	case catalog.ModeShared:
		share := strconv.FormatFloat(float64(o.ShareMilli)/1000, 'f', -1, 64)
		return share + " GPU, " + formatMiB(o.ShareMemoryMiB)
	case catalog.ModePartition:
		if o.MemoryPartition != "" {
			return "partition " + o.Partition + "/" + o.MemoryPartition
		}
		return "partition " + o.Partition
	case catalog.ModeVF:
		return "1 of " + strconv.Itoa(o.VFs) + " VFs"
	}
	return "-"
}

// instanceStore is an offering's instance store: "7680 GiB", or "-".
func instanceStore(o *catalog.Offering) string {
	if o.InstanceStoreGiB <= 0 {
		return "-"
	}
	return strconv.Itoa(o.InstanceStoreGiB) + " GiB"
}

func gpuCount(n int) string {
	if n == 1 {
		return "1 GPU"
	}
	return strconv.Itoa(n) + " GPUs"
}

// --- catalog validate ---

func newCatalogValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check an operator catalog file",
		Long: "Load an operator catalog file the way the server does and report the result.\n\n" +
			"On success it prints one line: how many models and offerings the file defines,\n" +
			"how many of them override built-ins (or that the file replaces the built-in\n" +
			"catalog), and exits 0. On failure it prints every problem as FILE:LINE: message\n" +
			"on one error line (problems separated by \"; \") and exits 1.\n\n" +
			"Unknown fields are errors, so a typo is caught rather than ignored. A model\n" +
			"override that breaks a built-in offering (for example by dropping the MIG\n" +
			"profile it uses) is reported too.",
		Example: strings.Join([]string{
			"  gpucloud catalog validate /etc/gpucloud/catalog.yaml",
			"",
			"  # In CI, before shipping a catalog change",
			"  gpucloud catalog validate deploy/catalog.yaml && gpucloud catalog offerings --catalog deploy/catalog.yaml",
		}, "\n"),
		Args: func(cmd *cobra.Command, args []string) error {
			if len(args) != 1 {
				return cmdutil.Usagef(cmd, "%s takes one FILE argument, got %d", cmd.CommandPath(), len(args))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			path := args[0]
			data, err := os.ReadFile(path)
			if err != nil {
				return err
			}
			if _, err := catalog.Load(bytes.NewReader(data), path); err != nil {
				return err
			}
			summary, err := summarizeCatalogFile(data)
			if err != nil {
				return fmt.Errorf("%s: %w", path, err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s; OK\n", path, summary)
			return nil
		},
	}
}

// summarizeCatalogFile describes a catalog file that has loaded: its model
// and offering counts and how many of each override a built-in.
func summarizeCatalogFile(data []byte) (string, error) {
	var fc struct {
		Models []struct {
			Name string `yaml:"name"`
		} `yaml:"models"`
		Offerings []struct {
			Name string `yaml:"name"`
		} `yaml:"offerings"`
		ReplaceBuiltin bool `yaml:"replace_builtin"`
	}
	if err := yaml.Unmarshal(data, &fc); err != nil {
		return "", err
	}
	builtinModels, builtinOfferings := map[string]bool{}, map[string]bool{}
	if !fc.ReplaceBuiltin {
		def := catalog.Default()
		for _, m := range def.Models() {
			builtinModels[strings.ToLower(m.Name)] = true
		}
		for _, o := range def.Offerings() {
			builtinOfferings[strings.ToLower(o.Name)] = true
		}
	}
	models := make([]string, len(fc.Models))
	for i, m := range fc.Models {
		models[i] = m.Name
	}
	offerings := make([]string, len(fc.Offerings))
	for i, o := range fc.Offerings {
		offerings[i] = o.Name
	}
	s := countOverrides(models, builtinModels, "model", "models") + ", " +
		countOverrides(offerings, builtinOfferings, "offering", "offerings")
	if fc.ReplaceBuiltin {
		s += ", replacing the built-in catalog"
	}
	return s, nil
}

// countOverrides says "3 models (1 new, 2 overriding built-ins)", or just
// "3 models" when none overrides a built-in.
func countOverrides(names []string, builtin map[string]bool, one, many string) string {
	over := 0
	for _, n := range names {
		if builtin[strings.ToLower(n)] {
			over++
		}
	}
	s := plural(len(names), one, many)
	switch over {
	case 0:
		return s
	case 1:
		return fmt.Sprintf("%s (%d new, 1 overriding a built-in)", s, len(names)-1)
	}
	return fmt.Sprintf("%s (%d new, %d overriding built-ins)", s, len(names)-over, over)
}
