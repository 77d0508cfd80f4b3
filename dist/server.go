package dist

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
)

// ServerConfig configures the NATS server a learner embeds.
type ServerConfig struct {
	// StoreDir holds JetStream's files (streams, buckets, consumer positions); put it under the
	// run directory so that a resumed run finds its queue where it left it.
	StoreDir string
	// Host is the interface to listen on; "" is 127.0.0.1. Anything that is not loopback lets
	// workers on other hosts join, so it needs WorkerToken.
	Host string
	// Port to listen on; 0 picks a free port (Server.URL says which).
	Port int
	// LearnerToken authenticates the learner (every permission); WorkerToken authenticates
	// workers, which may take tasks, publish trajectories and heartbeats and read weights, but
	// not publish weights or move the policy pointer. Empty tokens are generated.
	LearnerToken, WorkerToken string
	// WorkerNKeys are the public NKeys ("U…") of workers that authenticate by signing the
	// server's nonce with their seed instead of presenting the token (no secret crosses the
	// wire); they get the workers' permissions.
	WorkerNKeys []string
	// MaxPayload is the largest message in bytes (0: 8 MiB). Larger trajectories go through the
	// object store.
	MaxPayload int32
	// SyncAlways fsyncs every write before acknowledging it (safe across an OS crash or power
	// loss, slower); by default JetStream syncs every two minutes, which survives a killed process.
	SyncAlways bool
}

// DefaultMaxPayload is the message size limit of an embedded server.
const DefaultMaxPayload = 8 << 20

// Server is an embedded NATS server with JetStream.
type Server struct {
	ns  *server.Server
	cfg ServerConfig
}

// StartServer starts an embedded NATS server with JetStream and waits until it accepts
// connections. Both tokens are always required, on loopback too.
func StartServer(cfg ServerConfig) (*Server, error) {
	if cfg.StoreDir == "" {
		return nil, errors.New("dist: server: StoreDir is required")
	}
	if cfg.Host == "" {
		cfg.Host = "127.0.0.1"
	}
	if cfg.MaxPayload == 0 {
		cfg.MaxPayload = DefaultMaxPayload
	}
	if cfg.MaxPayload < 0 || cfg.MaxPayload > 64<<20 {
		return nil, fmt.Errorf("dist: server: max payload %d outside (0, 64 MiB]", cfg.MaxPayload)
	}
	if cfg.LearnerToken == "" {
		cfg.LearnerToken = NewToken()
	}
	if cfg.WorkerToken == "" {
		cfg.WorkerToken = NewToken()
	}
	if cfg.LearnerToken == cfg.WorkerToken {
		return nil, errors.New("dist: server: the learner and worker tokens must differ")
	}
	auth := &clientAuth{learner: cfg.LearnerToken, worker: cfg.WorkerToken, nkeys: map[string]bool{}}
	for _, k := range cfg.WorkerNKeys {
		if !nkeys.IsValidPublicUserKey(k) {
			return nil, fmt.Errorf("dist: server: worker nkey %q is not a public user key (U…)", k)
		}
		auth.nkeys[k] = true
	}
	port := cfg.Port
	if port == 0 {
		port = server.RANDOM_PORT
	}
	opts := &server.Options{
		ServerName:                 "agentrl-learner",
		Host:                       cfg.Host,
		Port:                       port,
		JetStream:                  true,
		StoreDir:                   cfg.StoreDir,
		MaxPayload:                 cfg.MaxPayload,
		SyncAlways:                 cfg.SyncAlways,
		NoSigs:                     true,
		NoLog:                      true,
		DisableJetStreamBanner:     true,
		AlwaysEnableNonce:          true, // for NKey signatures
		CustomClientAuthentication: auth,
	}
	if port != server.RANDOM_PORT {
		// A taken port is said at once (the server would only fail to become ready).
		addr := net.JoinHostPort(cfg.Host, strconv.Itoa(port))
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			return nil, fmt.Errorf("dist: server: listen on %s: %w", addr, err)
		}
		ln.Close()
	}
	ns, err := server.NewServer(opts)
	if err != nil {
		return nil, fmt.Errorf("dist: server: %w", err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		ns.Shutdown()
		return nil, errors.New("dist: server: not ready after 10s")
	}
	if cfg.Port == 0 {
		if a, ok := ns.Addr().(*net.TCPAddr); ok {
			cfg.Port = a.Port
		}
	}
	return &Server{ns: ns, cfg: cfg}, nil
}

// URL is the address clients connect to, nats://host:port.
func (s *Server) URL() string {
	return "nats://" + net.JoinHostPort(s.cfg.Host, strconv.Itoa(s.cfg.Port))
}

// Config is the configuration the server runs with, with generated tokens and the chosen port
// filled in: starting a new server with it after Shutdown brings back the same server.
func (s *Server) Config() ServerConfig { return s.cfg }

// LearnerToken and WorkerToken are the tokens the server accepts.
func (s *Server) LearnerToken() string { return s.cfg.LearnerToken }

// WorkerToken is the token workers connect with.
func (s *Server) WorkerToken() string { return s.cfg.WorkerToken }

// Shutdown stops the server and waits for it to close its files.
func (s *Server) Shutdown() {
	s.ns.Shutdown()
	s.ns.WaitForShutdown()
}

// NewToken returns 32 random hex digits.
func NewToken() string {
	var b [16]byte
	if _, err := rand.Read(b[:]); err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return hex.EncodeToString(b[:])
}

// clientAuth admits a client by its token, or by its NKey and its signature of the nonce, and
// gives it the learner's or a worker's permissions.
type clientAuth struct {
	learner, worker string
	nkeys           map[string]bool // workers' public keys
}

func (a *clientAuth) Check(c server.ClientAuthentication) bool {
	o := c.GetOpts()
	if o.Nkey != "" {
		if !a.nkeys[o.Nkey] || !verifyNonce(o.Nkey, o.Sig, c.GetNonce()) {
			return false
		}
		c.RegisterUser(&server.User{Username: "worker:" + o.Nkey, Permissions: WorkerPermissions()})
		return true
	}
	tok := o.Token
	switch {
	case subtle.ConstantTimeCompare([]byte(tok), []byte(a.learner)) == 1:
		c.RegisterUser(&server.User{Username: "learner"})
		return true
	case subtle.ConstantTimeCompare([]byte(tok), []byte(a.worker)) == 1:
		c.RegisterUser(&server.User{Username: "worker", Permissions: WorkerPermissions()})
		return true
	}
	return false
}

// verifyNonce checks sig (base64, as NATS clients send it) as the signature of nonce by the
// holder of the public key pub.
func verifyNonce(pub, sig string, nonce []byte) bool {
	if sig == "" || len(nonce) == 0 {
		return false
	}
	b, err := base64.RawURLEncoding.DecodeString(sig)
	if err != nil {
		if b, err = base64.StdEncoding.DecodeString(sig); err != nil {
			return false
		}
	}
	kp, err := nkeys.FromPublicKey(pub)
	if err != nil {
		return false
	}
	return kp.Verify(nonce, b) == nil
}

// NewNKey makes a new NKey user key pair: the seed ("SU…", secret: the client signs with it)
// and the public key ("U…", what a server is configured with).
func NewNKey() (seed, public string, err error) {
	kp, err := nkeys.CreateUser()
	if err != nil {
		return "", "", fmt.Errorf("dist: nkey: %w", err)
	}
	sb, err := kp.Seed()
	if err != nil {
		return "", "", fmt.Errorf("dist: nkey: %w", err)
	}
	pub, err := kp.PublicKey()
	if err != nil {
		return "", "", fmt.Errorf("dist: nkey: %w", err)
	}
	return string(sb), pub, nil
}

// WorkerPermissions is what a worker's credentials allow: pull tasks and ack them, publish
// trajectories, large-trajectory objects and heartbeats, read the policy pointer and the weights.
// Publishing to the weights store or the policy bucket, and creating, changing, purging or
// deleting streams, are not allowed. An external server gives worker users these permissions
// (docs/wire.md has them as a server configuration).
func WorkerPermissions() *server.Permissions {
	return &server.Permissions{
		Publish: &server.SubjectPermission{Allow: []string{
			SubjectPrefix + ".*.traj.>",
			"$KV." + WorkersBucket + ".>",
			"$O." + BlobsBucket + ".>",
			"$JS.API.INFO",
			"$JS.API.STREAM.INFO.>",
			"$JS.API.STREAM.NAMES",
			"$JS.API.STREAM.MSG.GET.>",
			"$JS.API.DIRECT.GET.>",
			"$JS.API.CONSUMER.INFO.>",
			"$JS.API.CONSUMER.MSG.NEXT.>",
			// ordered consumers, for watching the policy pointer and reading weights
			"$JS.API.CONSUMER.CREATE.KV_" + PolicyBucket + ".>",
			"$JS.API.CONSUMER.CREATE.OBJ_" + WeightsBucket + ".>",
			"$JS.ACK.>",
			"$JS.FC.>",
		}},
		Subscribe: &server.SubjectPermission{Allow: []string{"_INBOX.>"}},
	}
}
