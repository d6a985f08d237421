package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// EnvJoinToken carries an agent's join token, so that it need not be on
// the command line (where any user of the host sees it in ps).
const EnvJoinToken = "GPUCLOUD_JOIN_TOKEN"

// caFileName is where an agent keeps the cloud's CA in its data directory.
const caFileName = "ca.crt"

// agentClient is the HTTP client an agent talks to server with: plain for
// an http:// server; else trusting the CA kept in dataDir (ca.crt), or
// the CA the join token's fingerprint names, fetched from the server and
// checked against it, then kept; else the system's roots. joinString may
// be empty (a restart with a credential). It returns the join token's
// secret.
func agentClient(ctx context.Context, server, joinString, dataDir string) (*http.Client, string, error) {
	secret, fp, err := agentapi.SplitJoinToken(joinString)
	if err != nil {
		return nil, "", err
	}
	if strings.HasPrefix(server, "http://") {
		return &http.Client{Timeout: 60 * time.Second}, secret, nil
	}
	path := filepath.Join(dataDir, caFileName)
	caPEM, err := os.ReadFile(path)
	switch {
	case err == nil:
		if fp != "" {
			c, err := pki.ParseCert(caPEM)
			if err != nil {
				return nil, "", fmt.Errorf("%s: %w", path, err)
			}
			if pki.Fingerprint(c) != fp {
				return nil, "", fmt.Errorf("the join token names CA %s, but %s holds %s (another cloud's?): remove it to join this one", fp, path, pki.Fingerprint(c))
			}
		}
	case errors.Is(err, os.ErrNotExist) && fp != "":
		if caPEM, err = agentapi.FetchCA(ctx, server, fp); err != nil {
			return nil, "", err
		}
		if err := os.MkdirAll(dataDir, 0o700); err != nil {
			return nil, "", err
		}
		if err := os.WriteFile(path, caPEM, 0o600); err != nil {
			return nil, "", err
		}
	case errors.Is(err, os.ErrNotExist):
		caPEM = nil // the system's roots: an operator's certificate
	default:
		return nil, "", err
	}
	hc, err := agentapi.TLSClient(caPEM)
	return hc, secret, err
}

// readJoinToken is the join token from --join-token-file, $GPUCLOUD_JOIN_TOKEN
// or --join-token, in that order; the last one is visible to every user of
// the host in the process list, so it draws a warning.
func readJoinToken(flag, file string, stderr io.Writer) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--join-token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	if v := os.Getenv(EnvJoinToken); v != "" {
		return strings.TrimSpace(v), nil
	}
	if flag != "" {
		fmt.Fprintf(stderr, "warning: --join-token on the command line is visible to every user of this host (ps); prefer --join-token-file or $%s\n", EnvJoinToken)
	}
	return flag, nil
}
