package agentapi

// SSHSession is the argument of an ssh session (SessionRequest.SSH): what
// the agent's SSH endpoint (agent/sshd) needs from the server.
type SSHSession struct {
	// AuthorizedKeys are the instance's tenant's public keys as
	// authorized_keys lines (gpucloud keys), read when the session
	// started: only these may log in.
	AuthorizedKeys []string `json:"authorized_keys"`
}
