package dist

import (
	"strings"
	"testing"
)

// FuzzParseMsgID: a trajectory message id from the wire (any worker may write one) is parsed or
// refused, never a panic; what parses names the run, and the key is the id's prefix.
func FuzzParseMsgID(f *testing.F) {
	task := testTask("r", 7, 2)
	task.Epoch = 3
	for _, s := range []string{task.MsgID(1), task.MsgID(0) + ".7lZhZxIg9xxFcvXIRpGuHP", "r/7/2/3.1.", "r/7/2/3.1.bad nonce", "r/x/2/3.1", "r//", "", "r/7/2/3", "other/7/2/3.1"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, id string) {
		key, _, attempt, err := parseMsgID(id, "r")
		if err != nil {
			return
		}
		if !strings.HasPrefix(id, key+"/") || !strings.HasPrefix(key, "r/") || attempt < 0 {
			t.Fatalf("id %q parsed to key %q attempt %d", id, key, attempt)
		}
	})
}
