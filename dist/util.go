package dist

import (
	"encoding/json"
	"fmt"
)

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("dist: %w", err)
	}
	return b, nil
}

// termReasonUnderstood says whether a nats-server of the given version ("2.9.10") parses an
// acknowledgement "+TERM <reason>"; older ones (and an unknown version) get a plain "+TERM".
func termReasonUnderstood(version string) bool {
	var major, minor int
	if _, err := fmt.Sscanf(version, "%d.%d", &major, &minor); err != nil {
		return false
	}
	return major > 2 || major == 2 && minor >= 10
}
