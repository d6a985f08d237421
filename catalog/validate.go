package catalog

import (
	"fmt"
	"regexp"
	"strings"
)

// offeringNameRE keeps offering names lower-case and free of spaces and
// slashes, because they appear in URLs, CLI arguments and billing records.
var offeringNameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9.\-]*$`)

// modelNameRE is looser than offeringNameRE because model names follow
// vendor spelling ("H100-80GB-SXM", "1g.10gb+me"-style suffixes), but it
// still rejects spaces so that names survive being written on a command line.
var modelNameRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+\-]*$`)

// maxGPUsPerHost is the largest whole-GPU count an offering may ask for; no
// host we place on has more than 8 GPUs.
const maxGPUsPerHost = 8

// MaxInstanceStoreGiB is the largest instance store an offering may come
// with: 15 TiB. The agent keeps an instance's store in one sparse file on
// the host's disk, and a file on ext4 (the usual host filesystem) holds at
// most 16 TiB.
const MaxInstanceStoreGiB = 15 << 10

// validModes is the list shown when a mode is missing or unknown.
const validModes = "metal, gpu, mig, shared, cpu, partition, vf"

// ValidateOffering checks o against the catalog's models. It returns nil or a
// *ValidationError for the first problem found, naming the YAML field.
//
// Beyond the field ranges, it enforces that each mode only sets its own
// fields (a gpu offering with a MIG profile is a mistake, not something to
// ignore), that MIG offerings use the model's exact profile name so that
// Model.Profile finds it, and that mig and shared offerings leave gpus at 0
// because each is exactly one slice of one GPU.
func (c *Catalog) ValidateOffering(o *Offering) error {
	if err := c.validateOffering(o); err != nil {
		return err
	}
	return nil
}

func (c *Catalog) validateOffering(o *Offering) *ValidationError {
	if o == nil {
		return &ValidationError{Message: "offering is nil"}
	}
	fail := func(field, format string, args ...any) *ValidationError {
		return &ValidationError{Kind: "offering", Name: o.Name, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	if err := validateOfferingBasics(o, fail); err != nil {
		return err
	}
	model, err := c.offeringModel(o, fail)
	if err != nil {
		return err
	}
	if err := validateOtherModesUnset(o, fail); err != nil {
		return err
	}
	return validateModeFields(o, model, fail)
}

// failFunc builds the ValidationError of one field.
type failFunc func(field, format string, args ...any) *ValidationError

// validateOfferingBasics checks the fields every offering has: name, mode,
// vcpus, memory_mib and instance_store_gib.
func validateOfferingBasics(o *Offering, fail failFunc) *ValidationError {
	switch {
	case o.Name == "":
		return fail("name", "must not be empty")
	case !offeringNameRE.MatchString(o.Name):
		return fail("name", "must match %s (lower-case letters, digits, '.' and '-')", offeringNameRE)
	}
	switch {
	case o.Mode == "":
		return fail("mode", "must be set (one of %s)", validModes)
	case !o.Mode.Valid():
		return fail("mode", "unknown mode %q (want one of %s)", o.Mode, validModes)
	}
	if o.VCPUs < 0 {
		return fail("vcpus", "must not be negative, got %d", o.VCPUs)
	}
	if o.MemoryMiB < 0 {
		return fail("memory_mib", "must not be negative, got %d", o.MemoryMiB)
	}
	if o.InstanceStoreGiB < 0 || o.InstanceStoreGiB > MaxInstanceStoreGiB {
		return fail("instance_store_gib", "must be 0 (none) to %d GiB (15 TiB), got %d", MaxInstanceStoreGiB, o.InstanceStoreGiB)
	}
	return nil
}

// offeringModel returns the catalog model the offering names: required
// for gpu, mig and shared mode, forbidden for cpu mode, optional for metal
// (nil when unset).
func (c *Catalog) offeringModel(o *Offering, fail failFunc) (*Model, *ValidationError) {
	switch {
	case o.Model == "" && (o.Mode == ModeGPU || o.Mode == ModeMIG || o.Mode == ModeShared || o.Mode == ModePartition || o.Mode == ModeVF):
		return nil, fail("model", "required for %s mode", o.Mode)
	case o.Model != "" && o.Mode == ModeCPU:
		return nil, fail("model", "must be empty for cpu mode")
	case o.Model != "":
		m, err := c.Model(o.Model)
		if err != nil {
			return nil, fail("model", "%v", err)
		}
		return m, nil
	}
	return nil, nil
}

// validateOtherModesUnset checks that the fields of other modes are unset.
func validateOtherModesUnset(o *Offering, fail failFunc) *ValidationError {
	if o.MIGProfile != "" && o.Mode != ModeMIG {
		return fail("mig_profile", "only allowed in mig mode, not %s", o.Mode)
	}
	if o.Mode != ModePartition {
		if o.Partition != "" {
			return fail("partition", "only allowed in partition mode, not %s", o.Mode)
		}
		if o.MemoryPartition != "" {
			return fail("memory_partition", "only allowed in partition mode, not %s", o.Mode)
		}
	}
	if o.VFs != 0 && o.Mode != ModeVF {
		return fail("vfs", "only allowed in vf mode, not %s", o.Mode)
	}
	if o.Mode != ModeShared {
		if o.ShareMilli != 0 {
			return fail("share_milli", "only allowed in shared mode, not %s", o.Mode)
		}
		if o.ShareMemoryMiB != 0 {
			return fail("share_memory_mib", "only allowed in shared mode, not %s", o.Mode)
		}
	}
	return nil
}

// validateModeFields checks the fields of the offering's own mode against
// its model.
func validateModeFields(o *Offering, model *Model, fail failFunc) *ValidationError {
	switch o.Mode {
	case ModeMetal:
		if o.GPUs < 0 || o.GPUs > maxGPUsPerHost {
			return fail("gpus", "must be 0 (any host) or 1..%d for metal mode, got %d", maxGPUsPerHost, o.GPUs)
		}
	case ModeGPU:
		if o.GPUs < 1 || o.GPUs > maxGPUsPerHost {
			return fail("gpus", "must be 1..%d for gpu mode, got %d", maxGPUsPerHost, o.GPUs)
		}
	case ModeMIG:
		return validateMIGOffering(o, model, fail)
	case ModePartition:
		return validatePartitionOffering(o, model, fail)
	case ModeVF:
		return validateVFOffering(o, model, fail)
	case ModeShared:
		if o.GPUs != 0 {
			return fail("gpus", "must be 0 for shared mode (an offering is a share of one GPU), got %d", o.GPUs)
		}
		if o.ShareMilli < 1 || o.ShareMilli > 999 {
			return fail("share_milli", "fraction out of range: %d (want 1..999 milli of one GPU; use gpu mode for whole GPUs)", o.ShareMilli)
		}
		if o.ShareMemoryMiB <= 0 {
			return fail("share_memory_mib", "must be positive, got %d", o.ShareMemoryMiB)
		}
		if o.ShareMemoryMiB > model.MemoryMiB {
			return fail("share_memory_mib", "%d MiB exceeds the %d MiB of one %s", o.ShareMemoryMiB, model.MemoryMiB, model.Name)
		}
	case ModeCPU:
		if o.GPUs != 0 {
			return fail("gpus", "must be 0 for cpu mode, got %d", o.GPUs)
		}
		if o.VCPUs < 1 {
			return fail("vcpus", "must be at least 1 for cpu mode")
		}
	}
	return nil
}

// validateMIGOffering checks a mig offering: one instance of a profile the
// model has, named exactly as the model names it.
func validateMIGOffering(o *Offering, model *Model, fail failFunc) *ValidationError {
	if o.GPUs != 0 {
		return fail("gpus", "must be 0 for mig mode (an offering is one MIG instance), got %d", o.GPUs)
	}
	if !model.SupportsMIG() {
		return fail("model", "gpu model %q does not support MIG", model.Name)
	}
	valid := strings.Join(model.ProfileNames(), ", ")
	if o.MIGProfile == "" {
		return fail("mig_profile", "required for mig mode (valid for %s: %s)", model.Name, valid)
	}
	if model.Profile(o.MIGProfile) == nil {
		hint := ""
		if p, err := model.ResolveProfile(o.MIGProfile); err == nil {
			hint = fmt.Sprintf("; did you mean %q?", p.Name)
		}
		return fail("mig_profile", "%q is not a MIG profile of %s%s (valid: %s)", o.MIGProfile, model.Name, hint, valid)
	}
	return nil
}

// validateModel checks one model on its own: name, aliases, sizes and the MIG
// table. Clashes with other models are checked by the catalog as it adds them.
func validateModel(m *Model) *ValidationError {
	fail := func(field, format string, args ...any) *ValidationError {
		return &ValidationError{Kind: "model", Name: m.Name, Field: field, Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case m.Name == "":
		return fail("name", "must not be empty")
	case !modelNameRE.MatchString(m.Name):
		return fail("name", "must match %s", modelNameRE)
	}
	seen := map[string]bool{strings.ToLower(m.Name): true}
	for i, a := range m.Aliases {
		field := fmt.Sprintf("aliases[%d]", i)
		switch {
		case !modelNameRE.MatchString(a):
			return fail(field, "%q must match %s", a, modelNameRE)
		case seen[strings.ToLower(a)]:
			return fail(field, "%q repeats the model's name or another alias", a)
		}
		seen[strings.ToLower(a)] = true
	}
	if m.MemoryMiB <= 0 {
		return fail("memory_mib", "must be positive, got %d", m.MemoryMiB)
	}
	if m.NVLinkGBps < 0 {
		return fail("nvlink_gbps", "must not be negative, got %d", m.NVLinkGBps)
	}
	switch {
	case m.Vendor != "" && m.Vendor != VendorNVIDIA && m.Vendor != VendorAMD:
		return fail("vendor", "unknown vendor %q (want %s or %s)", m.Vendor, VendorNVIDIA, VendorAMD)
	case m.XGMIGBps < 0:
		return fail("xgmi_gbps", "must not be negative, got %d", m.XGMIGBps)
	case m.XGMIGBps > 0 && m.NVLinkGBps > 0:
		return fail("xgmi_gbps", "a model has NVLink or xGMI, not both")
	case m.XCDs < 0 || m.ComputeUnits < 0:
		return fail("xcds", "xcds and compute_units must not be negative")
	case len(m.Partitions) > 0 && len(m.MIGProfiles) > 0:
		return fail("partitions", "a model has MIG profiles or AMD partitions, not both")
	}
	if err := validatePartitions(m, fail); err != nil {
		return err
	}

	names := map[string]bool{}
	ids := map[int]bool{}
	for i := range m.MIGProfiles {
		if err := validateProfile(m, i, names, ids); err != nil {
			return err
		}
	}
	return nil
}

// validateProfile checks that profile i fits the MIG geometry: an instance
// occupies memory slots [start, start+memory_slots) of MIGMemorySlots and
// compute_slices of MIGComputeSlices, and max_per_gpu instances of it must
// fit side by side, or the placement engine would accept layouts the GPU
// cannot create.
func validateProfile(m *Model, i int, names map[string]bool, ids map[int]bool) *ValidationError {
	p := &m.MIGProfiles[i]
	fail := func(field, format string, args ...any) *ValidationError {
		return &ValidationError{Kind: "model", Name: m.Name,
			Field: fmt.Sprintf("mig_profiles[%d].%s", i, field), Message: fmt.Sprintf(format, args...)}
	}
	switch {
	case p.Name == "":
		return fail("name", "must not be empty")
	case !modelNameRE.MatchString(p.Name):
		return fail("name", "%q must match %s", p.Name, modelNameRE)
	case names[strings.ToLower(p.Name)]:
		return fail("name", "duplicate MIG profile name %q", p.Name)
	case isDecimal(p.Name):
		// ResolveProfile reads a bare number as a profile ID.
		return fail("name", "%q must not be a bare number", p.Name)
	}
	names[strings.ToLower(p.Name)] = true
	switch {
	case p.ID < 0:
		return fail("id", "must not be negative, got %d", p.ID)
	case ids[p.ID]:
		return fail("id", "duplicate MIG profile id %d", p.ID)
	}
	ids[p.ID] = true
	if p.ComputeSlices < 1 || p.ComputeSlices > MIGComputeSlices {
		return fail("compute_slices", "must be 1..%d, got %d", MIGComputeSlices, p.ComputeSlices)
	}
	if p.MemorySlots < 1 || p.MemorySlots > MIGMemorySlots {
		return fail("memory_slots", "must be 1..%d, got %d", MIGMemorySlots, p.MemorySlots)
	}
	if len(p.Starts) == 0 {
		return fail("starts", "must list at least one start slot")
	}
	seenStart := map[int]bool{}
	for _, s := range p.Starts {
		switch {
		case s < 0:
			return fail("starts", "start %d is negative", s)
		case s+p.MemorySlots > MIGMemorySlots:
			return fail("starts", "start %d + %d memory slots exceeds the %d memory slots", s, p.MemorySlots, MIGMemorySlots)
		case seenStart[s]:
			return fail("starts", "start %d is listed twice", s)
		}
		seenStart[s] = true
	}
	switch {
	case p.MaxPerGPU < 1:
		return fail("max_per_gpu", "must be at least 1, got %d", p.MaxPerGPU)
	case p.MaxPerGPU > len(p.Starts):
		return fail("max_per_gpu", "%d exceeds the %d start slots", p.MaxPerGPU, len(p.Starts))
	case p.MaxPerGPU*p.MemorySlots > MIGMemorySlots:
		return fail("max_per_gpu", "%d instances of %d memory slots exceed the %d memory slots", p.MaxPerGPU, p.MemorySlots, MIGMemorySlots)
	case p.MaxPerGPU*p.ComputeSlices > MIGComputeSlices:
		return fail("max_per_gpu", "%d instances of %d compute slices exceed the %d compute slices", p.MaxPerGPU, p.ComputeSlices, MIGComputeSlices)
	}
	if p.MemoryMiB <= 0 || p.MemoryMiB > m.MemoryMiB {
		return fail("memory_mib", "must be 1..%d (the model's memory), got %d", m.MemoryMiB, p.MemoryMiB)
	}
	return nil
}

// validatePartitionOffering checks a partition offering: one logical GPU of
// a compute partition mode the model has (not SPX, which is a whole GPU:
// gpu mode), spelled as the model spells it, and a memory partition mode
// valid with it when one is given.
func validatePartitionOffering(o *Offering, model *Model, fail failFunc) *ValidationError {
	if o.GPUs != 0 {
		return fail("gpus", "must be 0 for partition mode (an offering is one logical GPU), got %d", o.GPUs)
	}
	if !model.SupportsPartitions() {
		return fail("model", "gpu model %q has no compute partitions", model.Name)
	}
	var split []string
	for _, p := range model.Partitions {
		if p.Devices > 1 {
			split = append(split, p.Name)
		}
	}
	valid := strings.Join(split, ", ")
	cp := model.ComputePartitionNamed(o.Partition)
	switch {
	case o.Partition == "":
		return fail("partition", "required for partition mode (valid for %s: %s)", model.Name, valid)
	case cp == nil:
		return fail("partition", "%q is not a compute partition of %s (valid: %s)", o.Partition, model.Name, valid)
	case cp.Name != o.Partition:
		return fail("partition", "%q is not a compute partition of %s; did you mean %q? (valid: %s)", o.Partition, model.Name, cp.Name, valid)
	case cp.Devices == 1:
		return fail("partition", "%s is the whole GPU: use gpu mode (valid: %s)", cp.Name, valid)
	}
	if o.MemoryPartition != "" && !containsString(cp.MemoryPartitions, o.MemoryPartition) {
		return fail("memory_partition", "%q is not valid with %s on %s (valid: %s)", o.MemoryPartition, cp.Name, model.Name, strings.Join(cp.MemoryPartitions, ", "))
	}
	return nil
}

// validateVFOffering checks a vf offering: one of the VFs of a VF count the
// model can be exposed as.
func validateVFOffering(o *Offering, model *Model, fail failFunc) *ValidationError {
	if o.GPUs != 0 {
		return fail("gpus", "must be 0 for vf mode (an offering is one virtual function), got %d", o.GPUs)
	}
	if len(model.VFConfigs) == 0 {
		return fail("model", "gpu model %q cannot be exposed as virtual functions", model.Name)
	}
	for _, n := range model.VFCounts() {
		if n == o.VFs {
			return nil
		}
	}
	return fail("vfs", "%d is not a VF count of %s (valid: %v)", o.VFs, model.Name, model.VFCounts())
}
