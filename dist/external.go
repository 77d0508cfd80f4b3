package dist

import (
	"fmt"
	"strings"
)

// NATSUser is a client of an external nats-server: by user name and password, or by its public
// NKey ("U…"; the client holds the seed).
type NATSUser struct {
	User, Password string
	NKey           string
}

// NATSServerConfig is the text of a nats-server configuration file for the data plane: JetStream
// stored under storeDir, listening on listen (host:port), the learner with every permission, and
// each worker with WorkerPermissions — so that on an external server too a worker cannot publish
// weights, move the policy pointer or touch streams.
func NATSServerConfig(listen, storeDir string, learner NATSUser, workers ...NATSUser) string {
	p := WorkerPermissions()
	list := func(ss []string) string {
		q := make([]string, len(ss))
		for i, s := range ss {
			q[i] = fmt.Sprintf("%q", s)
		}
		return "[" + strings.Join(q, ", ") + "]"
	}
	user := func(u NATSUser, perms string) string {
		id := fmt.Sprintf("user: %q, password: %q", u.User, u.Password)
		if u.NKey != "" {
			id = fmt.Sprintf("nkey: %q", u.NKey)
		}
		return "    { " + id + perms + " }\n"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "listen: %q\nmax_payload: %d\njetstream { store_dir: %q }\nauthorization {\n  users = [\n", listen, DefaultMaxPayload, storeDir)
	b.WriteString(user(learner, ""))
	perms := fmt.Sprintf(", permissions: { publish: { allow: %s }, subscribe: { allow: %s } }", list(p.Publish.Allow), list(p.Subscribe.Allow))
	for _, w := range workers {
		b.WriteString(user(w, perms))
	}
	b.WriteString("  ]\n}\n")
	return b.String()
}
