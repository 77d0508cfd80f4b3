// Package envref reads the secrets a run's configuration names but never holds: an api_key or a
// token is written "${NAME}", and its value is the environment variable NAME, read when it is
// used, so a saved configuration carries the reference and not the secret.
package envref

import (
	"fmt"
	"os"
	"regexp"
)

// refRE is a whole reference: "${NAME}" with NAME an environment variable name.
var refRE = regexp.MustCompile(`^\$\{([A-Za-z_][A-Za-z0-9_]*)\}$`)

// IsRef reports whether ref is a reference "${NAME}".
func IsRef(ref string) bool { return refRE.MatchString(ref) }

// Resolve returns the value of the environment variable that ref names. A ref that is not a
// reference, and a variable that is unset or empty, are errors.
func Resolve(ref string) (string, error) {
	m := refRE.FindStringSubmatch(ref)
	if m == nil {
		return "", fmt.Errorf("%q is not a ${NAME} reference to an environment variable", ref)
	}
	name := m[1]
	v, ok := os.LookupEnv(name)
	if !ok || v == "" {
		return "", fmt.Errorf("environment variable %s is not set", name)
	}
	return v, nil
}
