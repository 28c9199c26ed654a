package rendezvous

import (
	"context"
	"net/http"
	"testing"
)

// Stats counts requests by method and error answers by status code: an
// unsigned request to a store with a secret is a 401 refusal.
func TestStatsCountRequestsAndRefusals(t *testing.T) {
	s := newServer(t, []byte("secret"))
	c := newClient(t, ClientConfig{Addr: s.Addr(), Secret: []byte("secret")})
	if err := c.Put(context.Background(), "a", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(context.Background(), "a", "k"); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := raw(t, http.MethodGet, "http://"+s.Addr()+"/a/k", nil); code != http.StatusUnauthorized {
		t.Fatalf("unsigned GET: %d", code)
	}
	st := s.Stats()
	if st.ByMethod["PUT"] != 1 || st.ByMethod["GET"] != 2 || st.Refused[401] != 1 || len(st.Refused) != 1 {
		t.Errorf("by method %v, refused %v; want PUT 1, GET 2, one 401", st.ByMethod, st.Refused)
	}
}
