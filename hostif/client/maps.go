package client

import (
	"context"
	"fmt"

	"github.com/aitherion/dpu/hostif/wire"
)

// Maps lists the dpu_mmap areas the processes of this host reported
// (MAPS): for a caller other than uid 0, those of its own uid. total is
// how many there are; the reply holds at most wire.MaxMapsListed of them.
func (c *Client) Maps(ctx context.Context) (total int, entries []wire.MapsListed, err error) {
	res, err := c.do(ctx, &wire.Request{Header: wire.Header{Op: wire.OpMaps}})
	if err != nil {
		return 0, nil, err
	}
	defer res.release()
	total, entries, err = wire.DecodeMapsList(res.body)
	if err != nil {
		return 0, nil, fmt.Errorf("%w: %v", ErrProtocol, err)
	}
	return total, entries, nil
}

// ReportMaps tells the agent which dpu_mmap areas this process maps now
// (replacing this connection's previous report; at most
// wire.MaxMapsReported of them). It is what libdpu sends; Go programs
// that map shared pages themselves may send it too.
func (c *Client) ReportMaps(ctx context.Context, areas []wire.MapsEntry) error {
	if len(areas) == 0 || len(areas) > wire.MaxMapsReported {
		return fmt.Errorf("report of %d areas (1..%d)", len(areas), wire.MaxMapsReported)
	}
	var body []byte
	for _, a := range areas {
		body = wire.AppendMapsEntry(body, a)
	}
	return c.simple(ctx, &wire.Request{Header: wire.Header{Op: wire.OpMaps}, Data: body})
}
