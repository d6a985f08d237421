package billing

import (
	"encoding/csv"
	"io"
	"strconv"
	"time"

	"github.com/gpucloud/gpucloud/money"
)

// Category is what an invoice line charges for.
type Category string

// Line categories.
const (
	CategoryCompute           Category = "compute"
	CategoryMinimum           Category = "minimum"
	CategoryCommitmentUpfront Category = "commitment_upfront"
	CategoryCommitmentFee     Category = "commitment_fee"
	CategoryVolume            Category = "volume"
	CategoryAddress           Category = "address"
)

// Line models: how the seconds of a compute or minimum line are priced.
const (
	ModelOnDemand = "on_demand"
	ModelSpot     = "spot"
	ModelReserved = "reserved"
	ModelRetainer = "retainer"
)

// Line units.
const (
	UnitSecond     = "second"
	UnitGiBSecond  = "GiB-second"
	UnitUnitSecond = "unit-second"
	UnitEach       = "each"
)

// Line is one invoice line: a quantity at a unit price.
type Line struct {
	Category     Category `json:"category"`
	Model        string   `json:"model,omitempty"`
	Offering     string   `json:"offering,omitempty"`
	Zone         string   `json:"zone,omitempty"`
	CommitmentID string   `json:"commitment_id,omitempty"`
	Description  string   `json:"description"`
	// Quantity is seconds; GiB-seconds for volumes; unit-seconds for
	// commitment fees; 1 for an upfront fee.
	Quantity int64  `json:"quantity"`
	Unit     string `json:"unit"`
	// UnitPrice is per hour; per GiB-month for volumes; the fee itself for
	// an upfront fee.
	UnitPrice money.Micros `json:"unit_price"`
	// Amount is UnitPrice × Quantity in the unit's period (an hour, a
	// 730-hour month for volumes), rounded once.
	Amount money.Micros `json:"amount"`
	// EndpointID and Endpoint (its name) are set on the compute and
	// minimum lines of a serverless endpoint's workers, which have lines
	// of their own per endpoint.
	EndpointID string `json:"endpoint_id,omitempty"`
	Endpoint   string `json:"endpoint,omitempty"`
}

// PriceUnit says what the line's UnitPrice is per, as it is printed after
// the price: "/h", "/GiB-month", "/unit-h" or " each".
func (l Line) PriceUnit() string {
	switch l.Unit {
	case UnitGiBSecond:
		return "/GiB-month"
	case UnitUnitSecond:
		return "/unit-h"
	case UnitEach:
		return " each"
	}
	return "/h"
}

// Invoice is a tenant's charges for a period as of a time. It is final
// once AsOf has reached the period's end.
type Invoice struct {
	TenantID string       `json:"tenant_id"`
	Month    string       `json:"month"`
	Start    time.Time    `json:"start"`
	End      time.Time    `json:"end"`
	AsOf     time.Time    `json:"as_of"`
	Final    bool         `json:"final"`
	Currency string       `json:"currency"`
	Lines    []Line       `json:"lines"`
	Total    money.Micros `json:"total"`
}

// csvHeader is WriteCSV's header row.
// Columns are only ever appended, so that readers by position keep
// working.
var csvHeader = []string{"tenant_id", "month", "category", "model", "offering", "zone", "commitment_id", "description", "quantity", "unit", "unit_price", "amount",
	"endpoint_id", "endpoint"}

// WriteCSV writes invoices as CSV: a header, then each invoice's lines
// followed by a row with category "total" and the invoice total as its
// amount. Amounts are money strings ("4320.00").
func WriteCSV(w io.Writer, invs []*Invoice) error {
	cw := csv.NewWriter(w)
	if err := cw.Write(csvHeader); err != nil {
		return err
	}
	for _, inv := range invs {
		if inv == nil {
			continue
		}
		for _, l := range inv.Lines {
			row := []string{inv.TenantID, inv.Month, string(l.Category), l.Model, l.Offering, l.Zone, l.CommitmentID, l.Description,
				strconv.FormatInt(l.Quantity, 10), l.Unit, l.UnitPrice.String(), l.Amount.String(), l.EndpointID, l.Endpoint}
			if err := cw.Write(row); err != nil {
				return err
			}
		}
		if err := cw.Write([]string{inv.TenantID, inv.Month, "total", "", "", "", "", "total " + inv.Currency, "", "", "", inv.Total.String(), "", ""}); err != nil {
			return err
		}
	}
	cw.Flush()
	return cw.Error()
}
