package journal

import (
	"cmp"
	"slices"
)

func sortRecords(rs []Record) {
	slices.SortFunc(rs, func(a, b Record) int {
		if c := a.Created.Compare(b.Created); c != 0 {
			return c
		}
		return cmp.Compare(a.ID, b.ID)
	})
}
