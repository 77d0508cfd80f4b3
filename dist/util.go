package dist

import (
	"encoding/json"
	"fmt"
	"strconv"
)

func itoa(i int) string { return strconv.Itoa(i) }

func jsonMarshal(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("dist: %w", err)
	}
	return b, nil
}
