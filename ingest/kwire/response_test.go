package kwire

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"
)

// A response of a Fetch version the package does not parse is refused with
// the version and the bound it passed, never misread: the body here is
// the one of the nearest version read, which would parse.
func TestFetchResponseVersionBounds(t *testing.T) {
	for _, c := range []struct {
		version int16
		body    int16  // the version whose encoding the body has
		refused string // "" when it is read
	}{
		{MinFetchVersion - 1, MinFetchVersion, "version 3 is older than 4, the lowest Fetch version read here"},
		{MinFetchVersion, MinFetchVersion, ""},
		{MaxFetchVersion, MaxFetchVersion, ""},
		{MaxFetchVersion + 1, MaxFetchVersion, "version 12 is newer than 11, the highest Fetch version read here"},
	} {
		body := fetchResponseBody(c.body, 50, 42, nil, nil)
		frame := binary.BigEndian.AppendUint32(nil, uint32(4+len(body)))
		frame = binary.BigEndian.AppendUint32(frame, 7) // correlation id
		res, err := ReadFetchResponse(bytes.NewReader(append(frame, body...)), c.version, 7, nil)
		switch {
		case c.refused == "" && (err != nil || len(res.Partitions) != 1 || res.Partitions[0].HighWatermark != 50):
			t.Errorf("v%d: %+v, %v; want it read", c.version, res, err)
		case c.refused != "" && (err == nil || !strings.Contains(err.Error(), c.refused)):
			t.Errorf("v%d: %+v, %v; want it refused: %s", c.version, res, err, c.refused)
		}
	}
}
