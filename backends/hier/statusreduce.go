package hier

import "github.com/hvdorg/hvd/backends"

var _ backends.StatusReducer = (*Comm)(nil)

// ReduceStatus delegates to Flat, where the engine idles (see
// AllgatherStatus); a Flat that cannot reduce gets the vectors by
// AllgatherStatus and folds them here in rank order: the same answer.
func (c *Comm) ReduceStatus(send []byte, combine func(lo, hi []byte) []byte) ([]byte, error) {
	if c.ctl == nil {
		return nil, errNoControl
	}
	if r, ok := c.ctl.(backends.StatusReducer); ok {
		var out []byte
		err := c.flatCall(func() (err error) { out, err = r.ReduceStatus(send, combine); return err })
		return out, err
	}
	all := make([]byte, len(send)*c.size)
	if err := c.flatCall(func() error { return c.ctl.AllgatherStatus(send, all) }); err != nil {
		return nil, err
	}
	acc := all[:len(send)]
	for r := 1; r < c.size; r++ {
		acc = combine(acc, all[r*len(send):(r+1)*len(send)])
	}
	return acc, nil
}
