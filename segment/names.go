package segment

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/seglog/seglog/vfs"
)

// Name returns the file name of segment id: 16 hex digits and ".seg", so
// that names sort in ID order. Part of the on-disk format.
func Name(id uint64) string { return fmt.Sprintf("%016x.seg", id) }

// ParseName returns the ID in a segment file name made by Name.
func ParseName(name string) (uint64, bool) {
	hex, ok := strings.CutSuffix(name, ".seg")
	if !ok || len(hex) != 16 || strings.ToLower(hex) != hex {
		return 0, false
	}
	id, err := strconv.ParseUint(hex, 16, 64)
	return id, err == nil
}

// List returns the IDs of the segment files in dir, in increasing order.
// Other files are ignored.
func List(fsys vfs.FS, dir string) ([]uint64, error) {
	return listIDs(fsys, dir, ParseName) // (Name sorts like the IDs)
}

// listIDs returns the IDs that parse finds in the names of the files in
// dir, in the order of the names (vfs.FS.List sorts them). Other files
// are ignored.
func listIDs[T any](fsys vfs.FS, dir string, parse func(string) (T, bool)) ([]T, error) {
	names, err := orDefault(fsys).List(dir)
	if err != nil {
		return nil, err
	}
	var ids []T
	for _, n := range names {
		if id, ok := parse(n); ok {
			ids = append(ids, id)
		}
	}
	return ids, nil
}
