package dataset

import (
	"errors"
	"fmt"
	"io"
	"math/big"
	"strconv"
	"unicode/utf8"

	"github.com/parquet-go/parquet-go"
)

// readParquet reads a Parquet file row by row (github.com/parquet-go/parquet-go), each row a
// map of its top-level columns. A file the library cannot read is an error, a panic of the
// library on a corrupt file included.
func readParquet(r io.ReaderAt, size int64, c Config) (d *Data, err error) {
	c = c.withDefaults()
	defer func() {
		if p := recover(); p != nil {
			d, err = nil, fmt.Errorf("parquet: the file is corrupt: %v", p)
		}
	}()
	f, err := parquet.OpenFile(r, size)
	if err != nil {
		return nil, fmt.Errorf("parquet: %w", err)
	}
	if n := f.NumRows(); n > int64(c.MaxRows)*4+1024 {
		return nil, fmt.Errorf("%w: %d rows, far more than max_rows %d", ErrTooLarge, n, c.MaxRows)
	}
	// What the file says its pages hold once decompressed, so that a small corrupt file cannot
	// make the reader allocate without bound.
	var total int64
	for _, rg := range f.Metadata().RowGroups {
		for _, col := range rg.Columns {
			u := col.MetaData.TotalUncompressedSize
			if u < 0 || u > maxUncompressed(c, size) || total+u > maxUncompressed(c, size) {
				return nil, fmt.Errorf("%w: the column chunks claim %d uncompressed bytes, over %d", ErrTooLarge, total+u, maxUncompressed(c, size))
			}
			total += u
		}
	}
	b := newBuilder(c)
	pr := parquet.NewGenericReader[any](r)
	defer pr.Close()
	buf := make([]any, 64)
	line := 0
	for {
		n, rerr := pr.Read(buf)
		for _, v := range buf[:n] {
			line++
			m, ok := v.(map[string]any)
			if !ok {
				if e := b.skip(line, "wrong_type", fmt.Sprintf("a row of %T, not a record", v)); e != nil {
					return nil, e
				}
				continue
			}
			if e := b.add(line, func(f string) (string, error) {
				v, ok := m[f]
				if !ok {
					return "", missing(f)
				}
				return parquetValue(f, v)
			}); e != nil {
				return nil, e
			}
		}
		if errors.Is(rerr, io.EOF) {
			break
		}
		if rerr != nil {
			return nil, fmt.Errorf("parquet: row %d: %w", line+1, rerr)
		}
	}
	return b.finish()
}

// parquetValue turns a column's value into text.
func parquetValue(field string, v any) (string, error) {
	switch x := v.(type) {
	case nil:
		return "", missing(field)
	case string:
		if !utf8.ValidString(x) {
			return "", &fieldError{"invalid_utf8", fmt.Sprintf("field %q is not valid UTF-8", field)}
		}
		return x, nil
	case []byte:
		if !utf8.Valid(x) {
			return "", &fieldError{"invalid_utf8", fmt.Sprintf("field %q is not valid UTF-8", field)}
		}
		return string(x), nil
	case bool:
		return strconv.FormatBool(x), nil
	case int32:
		return strconv.FormatInt(int64(x), 10), nil
	case int64:
		return strconv.FormatInt(x, 10), nil
	case int:
		return strconv.Itoa(x), nil
	case uint32:
		return strconv.FormatUint(uint64(x), 10), nil
	case uint64:
		return strconv.FormatUint(x, 10), nil
	case float32:
		return strconv.FormatFloat(float64(x), 'g', -1, 32), nil
	case float64:
		return strconv.FormatFloat(x, 'g', -1, 64), nil
	case *big.Float:
		return x.Text('g', -1), nil
	case []any:
		return jsonValue(field, x)
	}
	return "", &fieldError{"wrong_type", fmt.Sprintf("field %q is %T, not text or a number", field, v)}
}

// maxUncompressed bounds a Parquet file's decompressed data: 16 times its size plus 1 MiB, and
// never more than max_bytes.
func maxUncompressed(c Config, size int64) int64 { return min(16*size+1<<20, c.MaxBytes) }
