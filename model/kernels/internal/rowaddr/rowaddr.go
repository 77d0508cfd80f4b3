// Package rowaddr addresses the rows of a matrix in the avo generators of the kernels' assembly
// (gemmgen, bf16gen, elemgen): a run of four rows from one base register, the row stride and
// three times it in two more, since an x86 address scales an index by 1, 2, 4 or 8 only.
package rowaddr

import (
	"github.com/mmcloughlin/avo/operand"
	"github.com/mmcloughlin/avo/reg"
)

// Row is the address disp bytes into row r (0–3) of the four rows from base, whose stride in
// bytes is ld, with ld3 = 3·ld: base, base+ld, base+2·ld, base+ld3.
func Row(base, ld, ld3 reg.Register, r, disp int) operand.Mem {
	switch r {
	case 0:
		return operand.Mem{Base: base, Disp: disp}
	case 1:
		return operand.Mem{Base: base, Index: ld, Scale: 1, Disp: disp}
	case 2:
		return operand.Mem{Base: base, Index: ld, Scale: 2, Disp: disp}
	}
	return operand.Mem{Base: base, Index: ld3, Scale: 1, Disp: disp}
}
