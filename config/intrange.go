package config

import (
	"fmt"
	"math/big"
	"reflect"
	"strings"

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
