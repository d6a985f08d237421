package console

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"html/template"
	"net/http"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/api"
	"github.com/gpucloud/gpucloud/billing"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/money"
)

// pages are the templates that render a whole page inside the layout.
var pages = []string{"login", "error", "instances", "instance", "launch", "fleet", "spot", "billing", "groups", "group", "stacks", "stack", "endpoints", "endpoint"}

// parseTemplates parses the layout with each page. A template error is a
// build defect: the console's tests parse every page.
func parseTemplates() map[string]*template.Template {
	out := map[string]*template.Template{}
	for _, p := range pages {
		t := template.New("layout.html").Funcs(funcs)
		t = template.Must(t.ParseFS(templateFS, "templates/layout.html", "templates/"+p+".html"))
		out[p] = t
	}
	return out
}

var funcs = template.FuncMap{
	"amount":       money.FormatAmount,
	"pausedCount":  api.PausedWorkers,
	"perHour":      perHour,
	"linePrice":    billing.FormatUnitPrice,
	"lineQty":      invoiceQuantity,
	"groupPrice":   groupPrice,
	"interruption": interruption,
	"memory":       memory,
	"gib":          gib,
	"reclaims":     reclaims,
	"tenant":       tenantName,
	"tenantText":   tenantText,
	"lastDecision": lastDecision,
	"newestFirst":  newestFirst,
	"newestStarts": newestFirstOf[cloud.ColdStart],
	"when": func(t time.Time) string {
		if t.IsZero() {
			return "—"
		}
		return t.UTC().Format("2006-01-02 15:04:05 UTC")
	},
	"iso": func(t time.Time) string { return t.UTC().Format(time.RFC3339) },
	"ago": func(now, t time.Time) string { return roughDuration(now.Sub(t)) },
	"until": func(now, t time.Time) string {
		if !t.After(now) {
			return "now"
		}
		return roughDuration(t.Sub(now))
	},
	"bp":   func(bp int64) string { return fmt.Sprintf("%d.%02d%%", bp/100, bp%100) },
	"join": strings.Join,
	// latency is a latency in milliseconds over n samples: "—" for none.
	"latency": func(n int, ms float64) string {
		if n == 0 {
			return "—"
		}
		return fmt.Sprintf("%.1f ms", ms)
	},
	"hosts": func(n int) string {
		if n == 1 {
			return "1 host"
		}
		return fmt.Sprintf("%d hosts", n)
	},
	"statusClass": statusClass,
	"value":       value,
	"stateClass": func(s cloud.State) string {
		switch s {
		case cloud.Running:
			return "ok"
		case cloud.Failed, cloud.Lost:
			return "bad"
		case cloud.Terminated, cloud.Stopped:
			return "off"
		}
		return "wait"
	},
}

// statusClass is the colour class of a stack's state or of a stack
// resource's status (an instance's state, "active", "deleted", ...); the
// text is always written out next to it.
func statusClass(s any) string {
	switch fmt.Sprint(s) {
	case "running", "active":
		return "ok"
	case "failed", "lost", "deleted":
		return "bad"
	case "stopped", "terminated", "destroyed", "retained", "released":
		return "off"
	}
	return "wait"
}

// value prints a template value (a stack's output or parameter, a
// property in a diff): a string as it is, anything else as JSON.
func value(v any) string {
	if s, ok := v.(string); ok {
		return s
	}
	b, err := json.Marshal(v)
	if err != nil {
		return fmt.Sprint(v)
	}
	return string(b)
}

// Money on every page has the one format of package money (see
// money.FormatAmount): an amount (a total, a cost, a budget) through the
// "amount" function, "$4,320.00"; a price through "perHour" or, for an
// invoice line, "linePrice", with its unit: "$2.4900/h". An invoice's
// amounts are rounded to cents so that they add up to its total
// (viewInvoice).

// perHour prints a price per hour: "$2.4900/h".
func perHour(m money.Micros) string { return money.FormatPrice(m) + "/h" }

func roughDuration(d time.Duration) string {
	switch {
	case d < 0:
		return "0s"
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm%02ds", int(d.Minutes()), int(d.Seconds())%60)
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh%02dm", int(d.Hours()), int(d.Minutes())%60)
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

// page is what every page's template gets: the session's facts, the
// current section for the navigation, and the page's own data.
type page struct {
	Title   string
	Section string
	Admin   bool
	User    string
	Tenant  string
	CSRF    string
	Now     time.Time
	// Names are the names of the tenants the session may read, by ID
	// (the "tenant" function shows a tenant by it).
	Names map[string]string
	Data  map[string]any
}

func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, name string, s *session, data map[string]any) {
	p := page{Section: name, Now: c.now(), Data: data}
	if t, ok := data["Title"].(string); ok {
		p.Title = t
	}
	if s != nil {
		p.Admin, p.User, p.Tenant, p.CSRF = s.admin(), s.user, s.actor.TenantID, s.csrf
		p.Names = c.tenantNames(r.Context(), s)
	}
	if sec, ok := data["Section"].(string); ok {
		p.Section = sec
	}
	var buf bytes.Buffer
	if err := c.tmpl[name].Execute(&buf, p); err != nil {
		c.log.Error("console template", "page", name, "err", err)
		http.Error(w, "template error", http.StatusInternalServerError)
		return
	}
	h := w.Header()
	h.Set("Content-Type", "text/html; charset=utf-8")
	h.Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// tenantNames are the names of the tenants s may read, by ID: every
// tenant's for an admin, a member's own tenant's; none when they cannot
// be read (pages then show IDs).
func (c *Console) tenantNames(ctx context.Context, s *session) map[string]string {
	names := map[string]string{}
	if s.admin() {
		ts, err := c.svc.Accounts.Tenants(ctx, s.actor)
		if err != nil {
			c.log.Warn("console: tenant names", "err", err)
		}
		for _, t := range ts {
			names[t.ID] = t.Name
		}
		return names
	}
	t, err := c.svc.Accounts.Tenant(ctx, s.actor, s.actor.TenantID)
	if err != nil {
		c.log.Warn("console: tenant name", "err", err)
		return names
	}
	names[t.ID] = t.Name
	return names
}
