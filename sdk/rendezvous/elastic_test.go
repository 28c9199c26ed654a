package rendezvous

import (
	"context"
	"testing"
	"time"
)

func TestServerSetAndAddPlan(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	s, err := NewServer(ServerConfig{Addr: "127.0.0.1:0", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	s.Init(map[string]int{"global": 2})
	c := NewClient(ClientConfig{Addr: s.Addr(), Secret: secret, Timeout: 5 * time.Second})
	defer c.Close()
	ctx := context.Background()

	// A held Get is answered by Set.
	got := make(chan []byte, 1)
	go func() {
		v, err := c.Get(ctx, "elastic", "assign.0")
		if err != nil {
			t.Error(err)
		}
		got <- v
	}()
	time.Sleep(50 * time.Millisecond)
	v := []byte(`{"epoch":0}`)
	s.Set("elastic", "assign.0", v)
	v[0] = 'x' // Set copies
	select {
	case b := <-got:
		if string(b) != `{"epoch":0}` {
			t.Fatalf("Get = %q", b)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Get not answered after Set")
	}

	// AddPlan keeps keys and makes the new scopes plan scopes.
	s.AddPlan(map[string]int{EpochScope("global", 1): 1})
	if b, ok, err := c.TryGet(ctx, "elastic", "assign.0"); err != nil || !ok || string(b) != `{"epoch":0}` {
		t.Fatalf("after AddPlan: %q %v %v", b, ok, err)
	}
	c1 := NewClient(ClientConfig{Addr: s.Addr(), Secret: secret, Epoch: 1, Timeout: 5 * time.Second})
	defer c1.Close()
	if err := c1.Put(ctx, "global", "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if err := c1.Delete(ctx, "global", "notarank"); err == nil {
		t.Fatal("DELETE of a non-rank key on a plan scope succeeded: AddPlan did not declare it")
	}
	if err := c1.Delete(ctx, "global", "0"); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := c1.TryGet(ctx, "global", "k"); ok {
		t.Fatal("plan scope global.e1 not cleared once its one rank finished")
	}
}

func TestServerPrefixed(t *testing.T) {
	secret := []byte("0123456789abcdef0123456789abcdef")
	s, err := NewServer(ServerConfig{Addr: "127.0.0.1:0", Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if m := s.Prefixed("elastic", "failed.1."); m != nil {
		t.Errorf("empty store: %v", m)
	}
	c := NewClient(ClientConfig{Addr: s.Addr(), Secret: secret, Timeout: 5 * time.Second})
	defer c.Close()
	ctx := context.Background()
	for k, v := range map[string]string{"failed.1.h:0": "h:2", "failed.10.h:1": "h:3", "failed.1.h:1": "h:2", "epoch": "1"} {
		if err := c.Put(ctx, "elastic", k, []byte(v)); err != nil {
			t.Fatal(err)
		}
	}
	m := s.Prefixed("elastic", "failed.1.")
	if len(m) != 2 || string(m["failed.1.h:0"]) != "h:2" || string(m["failed.1.h:1"]) != "h:2" {
		t.Errorf("Prefixed = %q", m)
	}
	m["failed.1.h:0"][0] = 'x' // a copy
	if v := s.Prefixed("elastic", "failed.1.h:0")["failed.1.h:0"]; string(v) != "h:2" {
		t.Errorf("the store's value changed through the copy: %q", v)
	}
}
