package billing

import (
	"fmt"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// listPerGPUHour is the built-in list price of one whole GPU per hour, in
// line with public GPU clouds in 2026. Operators replace it with their own
// price book (gpucloud prices set); it exists so that a fresh `gpucloud up`
// bills something sensible.
// Keys are canonical catalog model names (ListPrice looks the offering's
// model up in the catalog first); TestListPricesNameCatalogModels holds it.
var listPerGPUHour = map[string]money.Micros{
	"H200-141GB":     3_490_000,
	"H100-80GB-SXM":  2_490_000,
	"A100-80GB-SXM":  1_790_000,
	"A100-40GB-SXM":  1_290_000,
	"A100-40GB-PCIE": 1_290_000,
	"L40S":           990_000,
	"A10":            590_000,
	"L4":             490_000,
	"T4":             290_000,
	// AMD Instinct: the median on-demand MI300X price across public
	// clouds and the top of MI325X's range, as docs/CATALOG.md cites them.
	"MI300X": 1_990_000,
	"MI325X": 2_250_000,
}

// Built-in prices of storage, addresses and host CPUs.
var (
	// DefaultVolumePrice is per GiB-month.
	DefaultVolumePrice = money.MustParse("0.08")
	// DefaultAddressPrice is per address-hour.
	DefaultAddressPrice = money.MustParse("0.005")
	// defaultVCPUHour prices CPU-only offerings and GPU models without a
	// list price (a GPU model without one costs 16 vCPUs per 8 GiB of GPU
	// memory).
	defaultVCPUHour = money.MustParse("0.04")
)

// ListPrice is the built-in on-demand price per hour of an offering: the
// model's GPU price times the GPUs (a metal host counts 8 when it does not
// say), scaled by compute slices / 7 for MIG, by the share for
// time-sliced offerings, and by 1 / logical GPUs for an AMD compute
// partition or 1 / VFs for a virtual function.
func ListPrice(cat *catalog.Catalog, offering string) (money.Micros, error) {
	o, err := cat.Offering(offering)
	if err != nil {
		return 0, err
	}
	if o.Mode == catalog.ModeCPU || o.Model == "" && o.Mode != catalog.ModeMetal {
		return defaultVCPUHour * money.Micros(max(o.VCPUs, 1)), nil
	}
	perGPU := money.Micros(0)
	if o.Model != "" {
		m, err := cat.Model(o.Model)
		if err != nil {
			return 0, err
		}
		var ok bool
		if perGPU, ok = listPerGPUHour[m.Name]; !ok {
			perGPU = defaultVCPUHour * 2 * money.Micros(max(m.MemoryMiB/1024, 1))
		}
		switch o.Mode {
		case catalog.ModeMIG:
			p := m.Profile(o.MIGProfile)
			if p == nil {
				return 0, fmt.Errorf("offering %s: model %s has no MIG profile %s", o.Name, m.Name, o.MIGProfile)
			}
			return money.MulDiv(perGPU, int64(p.ComputeSlices), catalog.MIGComputeSlices)
		case catalog.ModeShared:
			return money.MulDiv(perGPU, int64(o.ShareMilli), 1000)
		case catalog.ModePartition:
			p := m.ComputePartitionNamed(o.Partition)
			if p == nil {
				return 0, fmt.Errorf("offering %s: model %s has no compute partition %s", o.Name, m.Name, o.Partition)
			}
			return money.MulDiv(perGPU, 1, int64(p.Devices))
		case catalog.ModeVF:
			if o.VFs < 1 {
				return 0, fmt.Errorf("offering %s: %d VFs", o.Name, o.VFs)
			}
			return money.MulDiv(perGPU, 1, int64(o.VFs))
		}
	} else {
		perGPU = listPerGPUHour["H100-80GB-SXM"]
	}
	n := o.GPUs
	if n == 0 {
		n = 8
	}
	return perGPU * money.Micros(n), nil
}

// DefaultPrices is the built-in price book: every offering of the catalog
// at its list price in every zone, volumes and addresses, all in force
// since the Unix epoch.
func DefaultPrices(cat *catalog.Catalog) ([]*cloud.Price, error) {
	epoch := time.Unix(0, 0).UTC()
	var out []*cloud.Price
	for _, o := range cat.Offerings() {
		p, err := ListPrice(cat, o.Name)
		if err != nil {
			return nil, err
		}
		out = append(out, &cloud.Price{Kind: cloud.PriceCompute, Offering: o.Name, Amount: p, EffectiveAt: epoch, Actor: "builtin"})
	}
	out = append(out,
		&cloud.Price{Kind: cloud.PriceVolume, Amount: DefaultVolumePrice, EffectiveAt: epoch, Actor: "builtin"},
		&cloud.Price{Kind: cloud.PriceAddress, Amount: DefaultAddressPrice, EffectiveAt: epoch, Actor: "builtin"})
	return out, nil
}
