package fleet

import (
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/gpucloud/gpucloud/catalog"
)

// Errors of the MIG geometry check. The agent's drivers (agent/gpu) use
// the same values, so errors.Is works across both.
var (
	// ErrBusy means the GPU or instance is in use: processes run on it, or
	// other MIG instances hold what the request needs.
	ErrBusy = errors.New("busy")
	// ErrNotSupported means the GPU model or driver cannot do what was
	// asked, such as MIG on an L40S; retrying does not help.
	ErrNotSupported = errors.New("not supported")
	// ErrInvalid means the request is malformed or does not fit the GPU's
	// state or geometry, such as a 3g profile at slot 2.
	ErrInvalid = errors.New("invalid request")
)

// CheckMIG reports whether a GPU instance of profile profileID can be created
// at slot start on a GPU of model m that already holds the instances in
// existing, and returns the profile when it can. The catalog's profile table
// is the ground truth: the start must be one the profile allows, the memory
// slots [start, start+size) must be free, the GPU's 7 compute slices, its one
// set of media engines and the profile's per-GPU limit must not be exceeded.
//
// Errors wrap ErrNotSupported (no MIG on the model, unknown profile),
// ErrInvalid (a start the profile cannot use) or ErrBusy (something another
// instance holds); each names the profile and the slots involved, because
// the operator reading it has to see why without a profile table at hand.
// CheckMIG does not look for an identical existing instance: callers that
// are idempotent look for one first.
func CheckMIG(m *catalog.Model, existing []MIGInstance, profileID, start int) (*catalog.MIGProfile, error) {
	if !m.SupportsMIG() {
		return nil, fmt.Errorf("gpu model %s has no MIG: %w", m.Name, ErrNotSupported)
	}
	p := m.ProfileByID(profileID)
	if p == nil {
		return nil, fmt.Errorf("MIG profile %d is not a profile of %s (it has %s): %w",
			profileID, m.Name, profileList(m), ErrNotSupported)
	}
	if !slices.Contains(p.Starts, start) {
		return nil, fmt.Errorf("MIG profile %s can start at slot %s, not %d: %w",
			MIGProfileLabel(m, p.ID), joinInts(p.Starts), start, ErrInvalid)
	}
	want := slotMask(start, p.MemorySlots)
	slicesUsed, count := 0, 0
	for _, in := range existing {
		if slotMask(in.Start, in.Slots)&want != 0 {
			return nil, fmt.Errorf("MIG profile %s at slot %d needs slots %s, but %s holds slots %s: %w",
				MIGProfileLabel(m, p.ID), start, slotRange(start, p.MemorySlots),
				MIGProfileLabel(m, in.ProfileID), slotRange(in.Start, in.Slots), ErrBusy)
		}
		if p.MediaExtensions && in.Media {
			return nil, fmt.Errorf("MIG profile %s needs the media engines, but %s at slot %d has them (one +me instance per GPU): %w",
				MIGProfileLabel(m, p.ID), MIGProfileLabel(m, in.ProfileID), in.Start, ErrBusy)
		}
		slicesUsed += in.Slices
		if in.ProfileID == p.ID {
			count++
		}
	}
	if count >= p.MaxPerGPU {
		return nil, fmt.Errorf("a GPU holds at most %d instance(s) of MIG profile %s, and has %d: %w",
			p.MaxPerGPU, MIGProfileLabel(m, p.ID), count, ErrBusy)
	}
	if slicesUsed+p.ComputeSlices > catalog.MIGComputeSlices {
		return nil, fmt.Errorf("MIG profile %s needs %d compute slices, but only %d of %d are free: %w",
			MIGProfileLabel(m, p.ID), p.ComputeSlices, catalog.MIGComputeSlices-slicesUsed, catalog.MIGComputeSlices, ErrBusy)
	}
	return p, nil
}

// MIGProfileLabel names a profile the way error messages and logs show it:
// "3g.40gb (id 9)", or "id 9" when the model does not know the ID.
func MIGProfileLabel(m *catalog.Model, id int) string {
	if p := m.ProfileByID(id); p != nil {
		return fmt.Sprintf("%s (id %d)", p.Name, id)
	}
	return "id " + strconv.Itoa(id)
}

// slotMask is the bit mask of memory slots [start, start+size).
func slotMask(start, size int) uint16 {
	return uint16((1<<size)-1) << start
}

func slotRange(start, size int) string {
	if size == 1 {
		return strconv.Itoa(start)
	}
	return fmt.Sprintf("%d-%d", start, start+size-1)
}

func profileList(m *catalog.Model) string {
	parts := make([]string, len(m.MIGProfiles))
	for i, p := range m.MIGProfiles {
		parts[i] = fmt.Sprintf("%d %s", p.ID, p.Name)
	}
	return strings.Join(parts, ", ")
}

func joinInts(v []int) string {
	parts := make([]string, len(v))
	for i, n := range v {
		parts[i] = strconv.Itoa(n)
	}
	if len(parts) > 1 {
		return strings.Join(parts[:len(parts)-1], ", ") + " or " + parts[len(parts)-1]
	}
	return strings.Join(parts, "")
}
