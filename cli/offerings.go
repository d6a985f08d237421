package cli

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cli/cmdutil"
	"github.com/gpucloud/gpucloud/client"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// canonicalModel resolves a GPU model name or alias through the built-in
// catalog; names it does not know (an operator's own models) compare
// case-insensitively.
func canonicalModel(name string) string {
	if name == "" {
		return ""
	}
	if c, err := catalog.Default().CanonicalModel(name); err == nil {
		return c
	}
	return name
}

// offeringRow is one offering as `gpucloud offerings` shows it: the
// catalog's offering with its on-demand price, its cheapest spot price and
// what the fleet can do for it. -o json and -o yaml print these fields
// next to the offering's own.
type offeringRow struct {
	*catalog.Offering
	// Price is the on-demand price per hour in force now: the one for
	// every zone, else the cheapest zone's (PriceZones > 1 then).
	Price      *money.Micros `json:"price,omitempty"`
	PriceZones int           `json:"price_zones,omitempty"`
	// SpotPrice is the cheapest current spot price over the offering's
	// pools (SpotPools of them); absent when it has no pool.
	SpotPrice *money.Micros `json:"spot_price,omitempty"`
	SpotPools int           `json:"spot_pools,omitempty"`
	// Availability is the server's, absent when it does not know.
	Availability *api.OfferingAvailability `json:"availability,omitempty"`
}

// availabilityText renders what the fleet can do for an offering: "yes
// (3 hosts free)", "full (2 hosts could run it)", "no host", or "?" when
// the server did not say.
func availabilityText(a *api.OfferingAvailability) string {
	switch {
	case a == nil:
		return "?"
	case a.Hosts == 0:
		return "no host"
	case a.FitsNow > 0:
		return "yes (" + plural(a.FitsNow, "host", "hosts") + " free)"
	}
	return "full (" + plural(a.Hosts, "host", "hosts") + " could run it)"
}

// priceText renders an offering's on-demand or spot price: "$2.4900/h",
// "from $0.8000/h" when zones differ, "-" when there is none, "?" when it
// could not be read.
func priceText(p *money.Micros, zones int, known bool) string {
	switch {
	case !known:
		return "?"
	case p == nil:
		return "-"
	case zones > 1:
		return "from " + formatPrice(*p) + "/h"
	}
	return formatPrice(*p) + "/h"
}

// offeringRows joins offerings with the compute prices in force and the
// spot pools; availability is by offering name.
func offeringRows(offerings []*catalog.Offering, prices []*cloud.Price, pools []api.SpotPool, avail map[string]api.OfferingAvailability) []offeringRow {
	type cheapest struct {
		zoneless *money.Micros
		min      *money.Micros
		zones    map[money.Micros]bool
	}
	od := map[string]*cheapest{}
	for _, p := range prices {
		if p.Kind != cloud.PriceCompute && p.Kind != "" {
			continue
		}
		c := od[p.Offering]
		if c == nil {
			c = &cheapest{zones: map[money.Micros]bool{}}
			od[p.Offering] = c
		}
		v := p.Amount
		if p.Zone == "" {
			c.zoneless = &v
		}
		if c.min == nil || v < *c.min {
			c.min = &v
		}
		c.zones[v] = true
	}
	spot := map[string]*cheapest{}
	for _, p := range pools {
		c := spot[p.Offering]
		if c == nil {
			c = &cheapest{zones: map[money.Micros]bool{}}
			spot[p.Offering] = c
		}
		v := p.Price
		if c.min == nil || v < *c.min {
			c.min = &v
		}
		c.zones[v] = true
	}
	rows := make([]offeringRow, 0, len(offerings))
	for _, o := range offerings {
		r := offeringRow{Offering: o}
		if c := od[o.Name]; c != nil {
			// One price for every zone is the price; zones priced apart
			// from it make it a range that starts at the cheapest.
			r.Price, r.PriceZones = c.min, len(c.zones)
			if c.zoneless != nil && len(c.zones) == 1 {
				r.Price = c.zoneless
			}
		}
		if c := spot[o.Name]; c != nil {
			r.SpotPrice, r.SpotPools = c.min, len(c.zones)
		}
		if a, ok := avail[o.Name]; ok {
			r.Availability = &a
		}
		rows = append(rows, r)
	}
	return rows
}

// offeringsTable renders offering rows; pricesKnown and spotKnown say
// whether the prices and the spot pools could be read.
func offeringsTable(rows []offeringRow, pricesKnown, spotKnown bool) [][]string {
	table := [][]string{{"NAME", "MODE", "MODEL", "RESOURCE", "VCPUS", "MEMORY", "STORE", "ON-DEMAND", "SPOT", "AVAILABLE"}}
	for _, r := range rows {
		o := r.Offering
		table = append(table, []string{o.Name, string(o.Mode), dash(canonicalModel(o.Model)), offeringResource(o),
			strconv.Itoa(o.VCPUs), formatMiB(o.MemoryMiB), instanceStore(o), priceText(r.Price, r.PriceZones, pricesKnown),
			priceText(r.SpotPrice, r.SpotPools, spotKnown), availabilityText(r.Availability)})
	}
	return table
}

func newOfferingsCommand(s *session) *cobra.Command {
	var (
		mode, model string
		available   bool
		out         outputFlag
	)
	modes := make([]string, len(offeringModes))
	for i, m := range offeringModes {
		modes[i] = string(m)
	}
	cmd := &cobra.Command{
		Use:   "offerings",
		Short: "List the offerings the server rents, with prices and availability",
		Long: "List the offerings (instance types) of the server's catalog, which may add\n" +
			"to the built-in one: the mode, the GPU model, what of the GPU it rents, the\n" +
			"vCPUs and memory that come with it, its instance store (STORE: local scratch\n" +
			"disk at /scratch, wiped when the instance stops, included in the price), and:\n\n" +
			"  ON-DEMAND  the price per hour in force now (\"from\" when zones differ)\n" +
			"  SPOT       the cheapest current spot price of its pools (\"-\": no pool yet)\n" +
			"  AVAILABLE  what the fleet can do for it as of the scheduler's last step:\n" +
			"             \"yes (N hosts free)\", \"full (N hosts could run it)\" when every\n" +
			"             host that could is busy, \"no host\" when no host in the fleet\n" +
			"             ever could (an instance of it would wait forever), \"?\" when\n" +
			"             the server does not know\n\n" +
			"--available keeps only the offerings some host could run. Pass a NAME to\n" +
			"'gpucloud instances create --offering'. 'gpucloud catalog offerings' shows the\n" +
			"built-in catalog without a server.",
		Example: "  gpucloud offerings\n  gpucloud offerings --available --mode mig --model H100\n  gpucloud offerings -o json",
		Args:    cmdutil.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := out.check(cmd); err != nil {
				return err
			}
			var wantMode catalog.Mode
			if mode != "" {
				if wantMode = catalog.Mode(strings.ToLower(mode)); !wantMode.Valid() {
					return cmdutil.Usagef(cmd, "--mode %q: want one of %s", mode, strings.Join(modes, ", "))
				}
			}
			wantModel := canonicalModel(model)
			c, err := s.connect(cmd)
			if err != nil {
				return err
			}
			ctx, cancel := interruptible(cmd)
			defer cancel()
			list, err := c.OfferingList(ctx)
			if err != nil {
				return c.explain(err)
			}
			offerings := []*catalog.Offering{}
			for _, o := range list.Offerings {
				if wantMode != "" && o.Mode != wantMode ||
					wantModel != "" && !strings.EqualFold(canonicalModel(o.Model), wantModel) {
					continue
				}
				if _, known := list.Availability[o.Name]; available && (!known || list.Availability[o.Name].Hosts == 0) {
					continue
				}
				offerings = append(offerings, o)
			}
			if available && len(list.Availability) == 0 {
				return fmt.Errorf("the server at %s does not say which offerings its fleet can run (it has not placed anything yet, or it is older than this command line): try again without --available", c.server)
			}
			// Prices and spot pools complete the table; when they cannot
			// be read it says "?" rather than failing the listing.
			stderr := cmd.ErrOrStderr()
			prices, err := c.Prices(ctx, client.PricesOptions{Kind: cloud.PriceCompute, At: clockNow()})
			pricesKnown := err == nil
			if err != nil {
				fmt.Fprintf(stderr, "warning: cannot read prices: %v\n", c.explain(err))
			}
			pools, err := c.SpotPools(ctx)
			spotKnown := err == nil
			if err != nil {
				fmt.Fprintf(stderr, "warning: cannot read spot prices: %v\n", c.explain(err))
			}
			rows := offeringRows(offerings, prices, pools, list.Availability)
			w := cmd.OutOrStdout()
			if !out.table() {
				return writeData(w, out.format, rows)
			}
			if len(rows) == 0 {
				filter := describeFilter(wantMode, wantModel)
				if available {
					filter += " that a host could run"
				}
				fmt.Fprintf(w, "no offerings%s\n", filter)
				return nil
			}
			return writeTable(w, offeringsTable(rows, pricesKnown, spotKnown))
		},
	}
	cmd.Flags().StringVar(&mode, "mode", "", "only offerings of this mode: "+strings.Join(modes, ", "))
	cmd.Flags().StringVar(&model, "model", "", "only offerings on this GPU model (name or alias)")
	cmd.Flags().BoolVar(&available, "available", false, "only offerings that some host of the fleet could run")
	out.register(cmd)
	_ = cmd.RegisterFlagCompletionFunc("mode", cobra.FixedCompletions(modes, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}
