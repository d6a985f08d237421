// Package console is gpucloud's web console: server-rendered HTML pages,
// embedded in the binary, over the same domain services as the API. A
// tenant's member sees exactly what their token sees through the API, an
// admin sees everything; every rule is the services', the console only
// renders and forwards.
//
// Log in exchanges an API token for a session cookie (HttpOnly, Secure,
// SameSite=Strict) that holds the token, so that revoking the token ends
// the session at once. Every form that changes something carries a CSRF
// token derived from the session's token (an HMAC only the holder of the
// cookie can compute), and a POST whose Origin is another site is refused
// before anything is read.
//
// Every request with a session cookie goes through the API's request
// limits (Options.Limiter): a cookie that is not a live user's token is a
// failed authentication of the browser's address, and past that address's
// limit the console answers 429 without looking cookies up; a live
// session's request takes from its user's bucket, the one the user's API
// requests take from.
package console

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"errors"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/catalog"
	"github.com/gpucloud/gpucloud/cloud"
	"github.com/gpucloud/gpucloud/service"
)

//go:embed templates/*.html
var templateFS embed.FS

//go:embed static
var staticFS embed.FS

// SessionCookie is the name of the console's session cookie.
const SessionCookie = "gpucloud_session"

// sessionTTL is how long a session cookie lives in the browser; the
// token's own expiry and revocation end it sooner.
const sessionTTL = 12 * time.Hour

// Options configure the console. The clock, the fleet's availability
// (which the launch flow shows) and the placement dry run (a stack plan's
// fit) are the services' (service.Options).
type Options struct {
	// Logger receives the causes of internal errors.
	Logger *slog.Logger
	// Limiter applies the API's request limits to the console's
	// requests: the server hands the console the API's own limiter
	// (httpapi.Limiter), so that they share its buckets. Without it the
	// console limits nothing; a server that serves it must set it.
	Limiter Limiter
	// Terminals runs the instance page's terminal: the server hands the
	// console the API's exec relay. Without it the page offers no
	// terminal, and says so.
	Terminals Terminals
	// Endpoints adds what the server's endpoint gateway knows (workers'
	// readiness, latency) to the endpoints' pages: the server hands the
	// console its gateway. Without it the pages show the store's view
	// alone.
	Endpoints EndpointStats
	// SpotClearInterval is how often the spot market clears prices (the
	// market controller's interval), which the spot page states. Zero:
	// the page does not say how often.
	SpotClearInterval time.Duration
}

// Limiter is the API's request limits as the console applies them;
// httpapi.Limiter implements it. A refusal is a *cloud.Error with code
// rate_limited whose Details["retry_after_seconds"] (an int) is how long
// to wait, and Details["limit"] which limit refused: "auth_failures" or
// "requests".
type Limiter interface {
	// CheckToken runs lookup, which looks up token, presented by r, under
	// the failed-authentication limit of r's source address: past it,
	// a token that has not authenticated recently is refused and lookup
	// does not run; a malformed token, or one lookup answers
	// unauthenticated, counts as a failure.
	CheckToken(r *http.Request, token string, lookup func() error) error
	// AllowUser takes one request of user (of tenant, in role) from the
	// user's bucket, the one the user's API requests take from: refused
	// when it is empty.
	AllowUser(ctx context.Context, user, tenant string, role cloud.Role) error
}

// The Details keys of a rate_limited refusal (Limiter).
const (
	retryAfterDetail = "retry_after_seconds"
	limitDetail      = "limit"
)

// Console is the console's http.Handler.
type Console struct {
	svc  *service.Services
	cat  *catalog.Catalog
	now  func() time.Time
	log  *slog.Logger
	mux  *http.ServeMux
	tmpl map[string]*template.Template
	// limits is Options.Limiter, nil for none.
	limits Limiter
	// terms is Options.Terminals, nil for none.
	terms Terminals
	// clearEvery is Options.SpotClearInterval.
	clearEvery time.Duration
	// stats is Options.Endpoints, nil for none.
	stats EndpointStats
}

// New returns the console over the services svc, which hold the store,
// the catalog and the clock.
func New(svc *service.Services, opts Options) *Console {
	if opts.Logger == nil {
		opts.Logger = slog.Default()
	}
	c := &Console{
		svc: svc, cat: svc.Catalog(), now: svc.Now, log: opts.Logger, mux: http.NewServeMux(), limits: opts.Limiter, terms: opts.Terminals,
		clearEvery: opts.SpotClearInterval, stats: opts.Endpoints,
	}
	c.tmpl = parseTemplates()
	static, _ := fs.Sub(staticFS, "static")
	c.mux.Handle("GET /static/", http.StripPrefix("/static/", cacheStatic(http.FileServerFS(static))))
	c.mux.HandleFunc("GET /login", c.loginPage)
	c.mux.HandleFunc("POST /login", c.login)
	c.mux.HandleFunc("POST /logout", c.authed(c.logout))
	c.mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "/instances", http.StatusSeeOther)
	})
	c.mux.HandleFunc("GET /instances", c.authed(c.instances))
	c.mux.HandleFunc("GET /instances/{id}", c.authed(c.instance))
	c.mux.HandleFunc("GET /instances/{id}/log", c.authed(c.instanceLog))
	c.mux.HandleFunc("GET /instances/{id}/charts", c.authed(c.instanceCharts))
	c.mux.HandleFunc("GET /instances/{id}/terminal/ws", c.terminalSocket)
	c.mux.HandleFunc("POST /instances/{id}/{action}", c.authed(c.act))
	c.mux.HandleFunc("GET /launch", c.authed(c.launchPage))
	c.mux.HandleFunc("POST /launch", c.authed(c.launch))
	c.mux.HandleFunc("GET /fleet", c.authed(c.fleetPage))
	c.mux.HandleFunc("GET /spot", c.authed(c.spotPage))
	c.mux.HandleFunc("GET /billing", c.authed(c.billingPage))
	c.mux.HandleFunc("GET /billing/meter", c.authed(c.meter))
	c.mux.HandleFunc("GET /groups", c.authed(c.groupsPage))
	c.mux.HandleFunc("GET /groups/{id}", c.authed(c.groupPage))
	c.mux.HandleFunc("GET /endpoints", c.authed(c.endpointsPage))
	c.mux.HandleFunc("GET /endpoints/{id}", c.authed(c.endpointPage))
	c.mux.HandleFunc("POST /endpoints/{id}/keys", c.authed(c.createEndpointKey))
	c.mux.HandleFunc("POST /endpoints/{id}/keys/{key}/revoke", c.authed(c.revokeEndpointKey))
	c.mux.HandleFunc("GET /stacks", c.authed(c.stacksPage))
	c.mux.HandleFunc("POST /stacks/plan", c.authed(c.planStack))
	c.mux.HandleFunc("GET /stacks/{name}", c.authed(c.stackPage))
	c.mux.HandleFunc("POST /stacks/{name}/destroy", c.authed(c.destroyStack))
	c.mux.HandleFunc("/", c.notFound)
	return c
}

// pageCSP is every page's Content-Security-Policy: nothing but the
// console's own files, no inline script or style.
const pageCSP = "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

// terminalCSP is the page's of an instance that offers a terminal, which
// differs in style-src alone:
// xterm.js (the terminal) sizes and colours its rows with <style>
// elements it writes at run time, which 'self' does not allow and which
// it offers no nonce for. Scripts stay the console's own files only, and
// the page's text is escaped by html/template as everywhere, so inline
// style adds no way in for a workload's or a tenant's text.
const terminalCSP = "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; script-src 'self'; frame-ancestors 'none'; form-action 'self'; base-uri 'none'"

// ServeHTTP serves the console with its security headers.
func (c *Console) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Content-Security-Policy", pageCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "same-origin")
	h.Set("X-Frame-Options", "DENY")
	if r.Method == http.MethodPost && !sameOrigin(r) {
		http.Error(w, "cross-site request refused", http.StatusForbidden)
		return
	}
	c.mux.ServeHTTP(w, r)
}

// sameOrigin reports whether a state-changing request comes from the
// console's own pages: browsers send Sec-Fetch-Site and Origin on POSTs.
func sameOrigin(r *http.Request) bool {
	if s := r.Header.Get("Sec-Fetch-Site"); s != "" && s != "same-origin" && s != "none" {
		return false
	}
	if o := r.Header.Get("Origin"); o != "" && o != "null" {
		u, err := url.Parse(o)
		if err != nil || u.Host != r.Host {
			return false
		}
	}
	return true
}

func cacheStatic(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		h.ServeHTTP(w, r)
	})
}

// session is who a console request acts as.
type session struct {
	actor  service.Actor
	secret string
	csrf   string
	user   string
}

func (s *session) admin() bool { return s.actor.Admin() }

type handler func(w http.ResponseWriter, r *http.Request, s *session) error

// authed resolves the session cookie to its token's actor under the
// request limits (session), sends the browser to the login page without
// a session, checks the CSRF token of every POST, and renders a handler's
// error as a page.
func (c *Console) authed(h handler) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, err := c.session(r)
		if err != nil {
			if cloud.ErrorCode(err) == cloud.Unauthenticated {
				clearCookie(w)
				if r.Method == http.MethodGet && r.Header.Get("Accept") != "application/json" {
					http.Redirect(w, r, "/login?next="+url.QueryEscape(r.URL.RequestURI()), http.StatusSeeOther)
					return
				}
			}
			c.fail(w, r, nil, err)
			return
		}
		if r.Method == http.MethodPost && !hmac.Equal([]byte(r.PostFormValue("csrf")), []byte(s.csrf)) {
			c.fail(w, r, s, &cloud.Error{Code: cloud.PermissionDenied, Message: "the form's CSRF token is missing or stale; reload the page and try again"})
			return
		}
		if err := h(w, r, s); err != nil {
			c.fail(w, r, s, err)
		}
	}
}

// session reads and checks the session cookie (sessionOf). A request
// without one is not logged in, which is no failed authentication: it
// looks nothing up.
func (c *Console) session(r *http.Request) (*session, error) {
	ck, err := r.Cookie(SessionCookie)
	if err != nil || ck.Value == "" {
		return nil, cloud.Errorf(cloud.Unauthenticated, "not logged in")
	}
	return c.sessionOf(r, ck.Value)
}

// sessionOf is the session of the token secret, presented by r (as its
// cookie, or typed on the login page), under the request limits: past
// the failed-authentication limit of r's address, rate_limited without a
// lookup; a secret that is not a live user's token counts as a failed
// authentication; a live one's request takes from its user's bucket,
// rate_limited when that is empty.
func (c *Console) sessionOf(r *http.Request, secret string) (*session, error) {
	if c.limits == nil {
		return c.lookupSession(r.Context(), secret)
	}
	var s *session
	err := c.limits.CheckToken(r, secret, func() (err error) {
		s, err = c.lookupSession(r.Context(), secret)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := c.limits.AllowUser(r.Context(), s.actor.ID, s.actor.TenantID, s.actor.Role); err != nil {
		return nil, err
	}
	return s, nil
}

// lookupSession finds the session of the token secret in the store.
func (c *Console) lookupSession(ctx context.Context, secret string) (*session, error) {
	if !strings.HasPrefix(secret, service.SecretPrefix) || len(secret) > 256 {
		return nil, cloud.Errorf(cloud.Unauthenticated, "invalid, revoked or expired token")
	}
	t, err := c.svc.Accounts.TokenOf(ctx, secret)
	if cloud.IsNotFound(err) {
		return nil, cloud.Errorf(cloud.Unauthenticated, "invalid, revoked or expired token")
	}
	if err != nil {
		return nil, err
	}
	if t.Role != cloud.RoleAdmin && t.Role != cloud.RoleMember {
		return nil, cloud.Errorf(cloud.Unauthenticated, "a %s token cannot log in to the console; use a user's API token", t.Role)
	}
	return &session{actor: service.Actor{ID: t.UserID, TenantID: t.TenantID, Role: t.Role},
		secret: secret, csrf: csrfToken(secret), user: t.UserID}, nil
}

// csrfToken is the CSRF token of a session: an HMAC of a fixed label
// keyed by the session's secret, so that a page from another site, which
// can neither read the cookie nor the console's pages, cannot forge it.
func csrfToken(secret string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte("gpucloud console csrf v1"))
	return hex.EncodeToString(m.Sum(nil))
}

func setCookie(w http.ResponseWriter, secret string) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: secret, Path: "/", MaxAge: int(sessionTTL / time.Second),
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

func clearCookie(w http.ResponseWriter) {
	http.SetCookie(w, &http.Cookie{Name: SessionCookie, Value: "", Path: "/", MaxAge: -1,
		HttpOnly: true, Secure: true, SameSite: http.SameSiteStrictMode})
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", nil, map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	secret := strings.TrimSpace(r.PostFormValue("token"))
	next := safeNext(r.PostFormValue("next"))
	s, err := c.sessionOf(r, secret)
	if cloud.ErrorCode(err) == cloud.RateLimited {
		ce := retryAfter(w, err)
		msg := ce.Message
		if msg != "" {
			msg = strings.ToUpper(msg[:1]) + msg[1:]
		}
		if ce.Details[limitDetail] == "auth_failures" {
			msg = "Too many failed logins from your address; " + ce.Message
		}
		c.render(w, r, http.StatusTooManyRequests, "login", nil, map[string]any{"Next": next, "Error": msg})
		return
	}
	if err != nil {
		status := http.StatusUnauthorized
		msg := "That token is not valid: it may be mistyped, revoked or expired."
		if cloud.ErrorCode(err) != cloud.Unauthenticated {
			status, msg = http.StatusInternalServerError, "The server could not check the token; try again."
			c.log.Error("console login", "err", err)
		} else if strings.Contains(err.Error(), "cannot log in") {
			msg = err.Error()
			msg = strings.TrimPrefix(msg, string(cloud.Unauthenticated)+": ")
		}
		c.render(w, r, status, "login", nil, map[string]any{"Next": next, "Error": msg})
		return
	}
	_ = s
	setCookie(w, secret)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// safeNext keeps a post-login redirect on this console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, "/") || strings.HasPrefix(next, "//") || strings.HasPrefix(next, "/\\") || strings.HasPrefix(next, "/login") {
		return "/instances"
	}
	return next
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request, s *session) error {
	clearCookie(w)
	http.Redirect(w, r, "/login", http.StatusSeeOther)
	return nil
}

func (c *Console) notFound(w http.ResponseWriter, r *http.Request) {
	s, err := c.session(r)
	if cloud.ErrorCode(err) == cloud.RateLimited {
		c.fail(w, r, nil, err)
		return
	}
	c.render(w, r, http.StatusNotFound, "error", s, map[string]any{"Status": 404, "Message": "There is no page at " + r.URL.Path + "."})
}

// retryAfter sets Retry-After from a rate_limited error's
// retry_after_seconds, and returns the error.
func retryAfter(w http.ResponseWriter, err error) *cloud.Error {
	var ce *cloud.Error
	if !errors.As(err, &ce) {
		return &cloud.Error{Code: cloud.RateLimited, Message: err.Error()}
	}
	if secs, ok := ce.Details[retryAfterDetail].(int); ok {
		w.Header().Set("Retry-After", strconv.Itoa(secs))
	}
	return ce
}

// fail renders an error page with the status the API would answer, and
// the API's message: another tenant's instance is "not found", exactly as
// a missing one.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, s *session, err error) {
	status, msg := c.statusOf(r, err)
	if status == http.StatusTooManyRequests {
		retryAfter(w, err)
	}
	if r.Header.Get("Accept") == "application/json" {
		writeJSON(w, status, map[string]any{"error": msg})
		return
	}
	c.render(w, r, status, "error", s, map[string]any{"Status": status, "Message": msg})
}

// statusOf is the HTTP status and the message the console shows for err
// (as fail renders them): the API's message for a domain error, a
// generic one, logged, for anything else.
func (c *Console) statusOf(r *http.Request, err error) (int, string) {
	var ce *cloud.Error
	if !errors.As(err, &ce) {
		c.log.Error("console", "path", r.URL.Path, "err", err)
		return http.StatusInternalServerError, "Something went wrong on the server; it has been logged."
	}
	switch ce.Code {
	case cloud.Invalid:
		return http.StatusBadRequest, ce.Message
	case cloud.NotFound:
		return http.StatusNotFound, ce.Message
	case cloud.Conflict:
		return http.StatusConflict, ce.Message
	case cloud.QuotaExceeded, cloud.PermissionDenied:
		return http.StatusForbidden, ce.Message
	case cloud.InsufficientCapacity, cloud.Unavailable:
		return http.StatusServiceUnavailable, ce.Message
	case cloud.Unauthenticated:
		return http.StatusUnauthorized, ce.Message
	case cloud.RateLimited:
		return http.StatusTooManyRequests, ce.Message
	}
	c.log.Error("console", "path", r.URL.Path, "err", err)
	return http.StatusInternalServerError, "Something went wrong on the server; it has been logged."
}
