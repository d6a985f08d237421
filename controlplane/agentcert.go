package controlplane

import (
	"time"

	"github.com/gpucloud/gpucloud/internal/pki"
)

// agentCertSigner is the services' SignAgentCert over the cloud's CA: at
// join, an agent's certificate request becomes a client certificate whose
// common name is the host ID the server decided, valid for
// pki.ClientLifetime from now on the wall clock, which is the clock TLS
// checks certificates with (not the services' clock, which tests scale). The server's TLS configuration verifies these
// certificates (ClientCAs), and the API accepts an agent credential only
// from a connection presenting its host's (httpapi.Options.RequireAgentCert).
//
// There is no revocation list: a re-join revokes the host's earlier
// credentials, and the earlier certificates, still valid until they
// expire, authenticate nothing without one.
func agentCertSigner(ca *pki.CA) func(csrPEM []byte, hostID string) ([]byte, error) {
	return func(csrPEM []byte, hostID string) ([]byte, error) {
		return ca.SignClient(csrPEM, hostID, time.Now())
	}
}
