package pipeline

import (
	"errors"
	"fmt"
	"math/big"
	"os"
	"reflect"
	"strings"
	"time"

	"github.com/goccy/go-yaml/ast"
)

// checkIntRange refuses an integer setting whose literal does not fit its type (seed: 2^64 is not
// a uint64): the YAML parser keeps such a literal as a string, which decoding would otherwise
// turn into another number.
func checkIntRange(n ast.Node, t reflect.Type, path string) error {
	var lit string
	switch v := n.(type) {
	case *ast.IntegerNode, *ast.StringNode:
		lit = strings.ReplaceAll(v.GetToken().Value, "_", "")
	default:
		return nil
	}
	x, ok := new(big.Int).SetString(lit, 0)
	if !ok {
		return nil // not a number: decoding says what is wrong
	}
	lo, hi := new(big.Int), new(big.Int)
	switch t.Kind() {
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr:
		hi.Lsh(big.NewInt(1), uint(t.Bits())).Sub(hi, big.NewInt(1))
	default:
		hi.Lsh(big.NewInt(1), uint(t.Bits()-1)).Sub(hi, big.NewInt(1))
		lo.Neg(hi).Sub(lo, big.NewInt(1))
	}
	if x.Cmp(lo) < 0 || x.Cmp(hi) > 0 {
		return fmt.Errorf("%s: %s is out of range: want an integer from %s to %s", path, tokenText(n), lo, hi)
	}
	return nil
}

func tokenText(n ast.Node) string { return n.GetToken().Value }

// configPipeWait bounds how long a configuration given as a named pipe may take to arrive.
var configPipeWait = 10 * time.Second

// pipeReadError says why reading a configuration failed, naming a pipe whose writer was too slow.
func pipeReadError(path string, pipe bool, read int, err error) error {
	if pipe && read == 0 && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s is a named pipe with no writer within %v: write the configuration into it, or give a file", path, configPipeWait)
	}
	if pipe && errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("%s: the named pipe's writer did not finish the configuration within %v", path, configPipeWait)
	}
	return err
}
