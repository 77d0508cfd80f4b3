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
