package agentcmd

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/gpucloud/gpucloud/agent"
	"github.com/gpucloud/gpucloud/agent/files"
	"github.com/gpucloud/gpucloud/agentapi"
	"github.com/gpucloud/gpucloud/internal/pki"
)

// EnvJoinToken carries an agent's join token, so that it need not be on
// the command line (where any user of the host sees it in ps).
const EnvJoinToken = "GPUCLOUD_JOIN_TOKEN"

// caFileName is where an agent keeps the cloud's CA in its data directory.
const caFileName = "ca.crt"

// JoinClient is the HTTP client an agent joins with: plain for an
// http:// server; else trusting the CA kept in dataDir (ca.crt), or the CA
// the join token's fingerprint names, fetched from the server and checked
// against it, then kept; else the system's roots. It presents no client
// certificate (the join issues one; agentCredClient presents it). joinString may
// be empty (a restart with a credential). It returns the join token's
// secret.
func JoinClient(ctx context.Context, server, joinString, dataDir string) (*http.Client, string, error) {
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

// Where an agent keeps its TLS client key and the certificate its join
// issued, in its data directory: the host's root only, like the
// credential, which works only together with them.
const (
	clientKeyFileName  = "client.key"
	clientCertFileName = "client.crt"
)

// keepClientCert writes the client key and certificate of a join into
// dataDir (each 0600, the directory 0700), replacing those of an earlier
// join. A join that issued no certificate (a plain-HTTP server) writes
// nothing.
func keepClientCert(dataDir string, j *agent.Joined) error {
	if j.Certificate == "" {
		return nil
	}
	if _, _, err := j.TLSCertificate(); err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return err
	}
	if err := agent.WriteSecret(filepath.Join(dataDir, clientKeyFileName), j.KeyPEM); err != nil {
		return err
	}
	return agent.WriteSecret(filepath.Join(dataDir, clientCertFileName), []byte(j.Certificate))
}

// agentCredClient is the HTTP client an agent uses with its credential:
// plain for an http:// server; else trusting the CA kept in dataDir (or
// the system's roots without one, as JoinClient) and presenting the
// client certificate kept there (mutual TLS), without which the server
// refuses the credential. A data directory that has none (an agent that
// joined before mutual TLS) is an error saying to join again.
func agentCredClient(server, dataDir string) (*http.Client, error) {
	if strings.HasPrefix(server, "http://") {
		return &http.Client{Timeout: 60 * time.Second}, nil
	}
	caPEM, err := os.ReadFile(filepath.Join(dataDir, caFileName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	keyPath, certPath := filepath.Join(dataDir, clientKeyFileName), filepath.Join(dataDir, clientCertFileName)
	keyPEM, kerr := os.ReadFile(keyPath)
	certPEM, cerr := os.ReadFile(certPath)
	if errors.Is(kerr, os.ErrNotExist) || errors.Is(cerr, os.ErrNotExist) {
		return nil, fmt.Errorf("no TLS client certificate in %s (%s, %s): the server accepts the agent's credential only with it; this host joined before agents had one: remove its credential file and start the agent again with a join token", dataDir, clientCertFileName, clientKeyFileName)
	}
	if kerr != nil {
		return nil, kerr
	}
	if cerr != nil {
		return nil, cerr
	}
	cert, err := agentapi.ClientCertificate(certPEM, keyPEM, "")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", certPath, err)
	}
	return agentapi.TLSClient(caPEM, cert)
}

// JoinedClient keeps what a join issued (keepClientCert) and returns the
// client the agent uses with its new credential (agentCredClient).
func JoinedClient(server, dataDir string, j *agent.Joined) (*http.Client, error) {
	if err := keepClientCert(dataDir, j); err != nil {
		return nil, err
	}
	return agentCredClient(server, dataDir)
}

// joinTokenFlagRefused is the answer to --join-token: a secret on the
// command line is visible to every user of the host in the process list.
const joinTokenFlagRefused = "--join-token is refused: a join token on the command line is visible to every user of this host (ps). " +
	"Put it in a file only root reads and pass --join-token-file FILE, or set $" + EnvJoinToken

// readJoinToken is the join token from --join-token-file (file) or
// $GPUCLOUD_JOIN_TOKEN, in that order; "" when neither has one.
func readJoinToken(file string) (string, error) {
	if file != "" {
		b, err := os.ReadFile(file)
		if err != nil {
			return "", fmt.Errorf("--join-token-file: %w", err)
		}
		return strings.TrimSpace(string(b)), nil
	}
	return strings.TrimSpace(os.Getenv(EnvJoinToken)), nil
}

// credentialFileName is the host credential's file in a data directory
// (the agent's default --credential-file).
const credentialFileName = "credential"

// KeptCredential is the host credential kept in dataDir by KeepCredential,
// with the client that presents the host's client certificate kept there
// (agentCredClient): what a re-join presents, as the server joins a host
// that has joined only with its current credential. It answers "" and a
// nil client when dataDir keeps no credential (a first join).
func KeptCredential(server, dataDir string) (string, *http.Client, error) {
	b, err := os.ReadFile(filepath.Join(dataDir, credentialFileName))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, nil
	}
	if err != nil {
		return "", nil, err
	}
	cred := strings.TrimSpace(string(b))
	if cred == "" {
		return "", nil, nil
	}
	hc, err := agentCredClient(server, dataDir)
	if err != nil {
		return "", nil, err
	}
	return cred, hc, nil
}

// KeepCredential keeps a join's credential in dataDir, 0600, for
// KeptCredential.
func KeepCredential(dataDir, credential string) error {
	return agent.WriteSecret(filepath.Join(dataDir, credentialFileName), []byte(credential+"\n"))
}

// listenDirect opens the direct-copy listener of --direct-listen
// (files.ListenDirect) for the host whose client certificate and CA the
// data directory keeps, and sets cfg's DirectAddr and DirectFingerprint to
// report it.
func listenDirect(fl *flags, cfg *agent.Config, log *slog.Logger) (*files.Direct, net.Listener, error) {
	hostID, caPEM, err := keptIdentity(fl.dir)
	if err != nil {
		return nil, nil, err
	}
	d, ln, addr, fp, err := files.ListenDirect(fl.directListen, fl.directAdvertise, hostID, caPEM, fl.dir, files.ForAgent(*cfg), log)
	if err != nil {
		return nil, nil, err
	}
	cfg.DirectAddr, cfg.DirectFingerprint = addr, fp
	return d, ln, nil
}

// tunnelDirect is the server of the direct sessions that come through
// the server's tunnels, for an agent without --direct-listen: nil, and no
// error, for an agent of a plain-HTTP server (no client certificate or
// CA kept), which takes none.
func tunnelDirect(fl *flags, cfg *agent.Config, log *slog.Logger) (*files.Direct, error) {
	hostID, caPEM, err := keptIdentity(fl.dir)
	if err != nil || len(caPEM) == 0 {
		return nil, nil
	}
	d, fp, err := files.NewDirect(hostID, caPEM, fl.dir, files.ForAgent(*cfg), log)
	if err != nil {
		return nil, err
	}
	cfg.DirectFingerprint = fp
	return d, nil
}

// keptIdentity is the host ID of the client certificate a join kept in
// dataDir (its common name) and the CA kept beside it. A data directory
// without them (a plain-HTTP server's agent) is an error saying so.
func keptIdentity(dataDir string) (hostID string, caPEM []byte, err error) {
	certPEM, err := os.ReadFile(filepath.Join(dataDir, clientCertFileName))
	if errors.Is(err, os.ErrNotExist) {
		return "", nil, fmt.Errorf("--direct-listen needs the TLS client certificate a join keeps in %s: a plain-HTTP server's agents take no direct sessions", dataDir)
	}
	if err != nil {
		return "", nil, err
	}
	cert, err := pki.ParseCert(certPEM)
	if err != nil {
		return "", nil, fmt.Errorf("%s: %w", clientCertFileName, err)
	}
	caPEM, err = os.ReadFile(filepath.Join(dataDir, caFileName))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return "", nil, err
	}
	return cert.Subject.CommonName, caPEM, nil
}
