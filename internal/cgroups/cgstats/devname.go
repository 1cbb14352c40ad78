package cgstats

import (
	"fmt"
	"os"
	"path/filepath"
	"sync"
)

// devNames caches block device names by number: device numbers of a running node rarely
// change, and the lookup is on every metrics call.
var devNames sync.Map // [2]uint64 -> string

// BlockDeviceName names a block device by its numbers, as /dev does ("/dev/sda"), from
// sysfs; "" where sysfs does not know it.
func BlockDeviceName(major, minor uint64) string {
	k := [2]uint64{major, minor}
	if v, ok := devNames.Load(k); ok {
		return v.(string)
	}
	target, err := os.Readlink(fmt.Sprintf("/sys/dev/block/%d:%d", major, minor))
	if err != nil {
		return "" // not cached: the device may appear later
	}
	name := "/dev/" + filepath.Base(target)
	devNames.Store(k, name)
	return name
}
