package mapstore_test

import (
	"testing"
	"time"

	"github.com/keypool-go/keypool"
	"github.com/keypool-go/keypool/examples/mapstore"
	"github.com/keypool-go/keypool/storetest"
)

func harness() storetest.Harness {
	c := storetest.NewClock(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	return storetest.Harness{
		Open:       func(*testing.T) keypool.Store { return mapstore.New() },
		Now:        c.Now,
		Advance:    c.Advance,
		ExactTimes: true, // its windows are logs of exact times
	}
}

func TestConformance(t *testing.T) { storetest.Run(t, harness()) }

func TestParity(t *testing.T) { storetest.Parity(t, harness()) }
