package natscluster

import (
	"errors"
	"fmt"
)

var errNotProxied = errors.New("natscluster: routes are not proxied; start the cluster with Options.ProxiedRoutes to cut them")

// CutRoutes partitions node i from node j (Options.ProxiedRoutes): the routes between them are
// reset and new ones refused, in both directions, until HealRoutes or Heal. Each node still talks
// to the others, so a majority may remain on either side.
func (c *Cluster) CutRoutes(i, j int) error { return c.setRoutes(i, j, true) }

// HealRoutes lets the routes between nodes i and j connect again.
func (c *Cluster) HealRoutes(i, j int) error { return c.setRoutes(i, j, false) }

// Isolate cuts node i from every other node: it keeps its clients but has no routes, as behind a
// failed switch port. The others keep a majority if the cluster has 3 or more nodes.
func (c *Cluster) Isolate(i int) error {
	if !c.opts.ProxiedRoutes {
		return errNotProxied
	}
	for j := range c.nodes {
		if j != i {
			if err := c.CutRoutes(i, j); err != nil {
				return err
			}
		}
	}
	return nil
}

// Heal lets every route connect again.
func (c *Cluster) Heal() error {
	for i := range c.nodes {
		for j := i + 1; j < len(c.nodes); j++ {
			if err := c.HealRoutes(i, j); err != nil {
				return err
			}
		}
	}
	return nil
}

func (c *Cluster) setRoutes(i, j int, cut bool) error {
	if !c.opts.ProxiedRoutes {
		return errNotProxied
	}
	if i == j || i < 0 || j < 0 || i >= len(c.nodes) || j >= len(c.nodes) {
		return fmt.Errorf("natscluster: no route between nodes %d and %d", i, j)
	}
	c.cutMu.Lock()
	if c.cut == nil {
		c.cut = map[[2]int]bool{}
	}
	c.cut[[2]int{min(i, j), max(i, j)}] = cut
	c.cutMu.Unlock()
	n := 0
	for _, k := range [][2]int{{i, j}, {j, i}} {
		px := c.proxies[k]
		px.Refuse(cut)
		if cut {
			n += px.Cut()
		}
	}
	if cut {
		c.logf("natscluster: routes between %s and %s cut (%d connections reset)", c.Name(i), c.Name(j), n)
	} else {
		c.logf("natscluster: routes between %s and %s healed", c.Name(i), c.Name(j))
	}
	return nil
}

// FreezeRoutes holds every route to and from node i (Options.ProxiedRoutes): nothing is read or
// written, and nothing is closed, until ThawRoutes, which delivers the bytes held in order. Node i
// keeps its clients and answers them from its own state (a follower that lags, not one that is
// gone); what it sends to the others arrives late. Keep it shorter than a raft election timeout
// (4s) unless an election is what the test wants.
func (c *Cluster) FreezeRoutes(i int) error { return c.freezeRoutes(i, true) }

// ThawRoutes ends FreezeRoutes(i).
func (c *Cluster) ThawRoutes(i int) error { return c.freezeRoutes(i, false) }

func (c *Cluster) freezeRoutes(i int, freeze bool) error {
	if !c.opts.ProxiedRoutes {
		return errNotProxied
	}
	if i < 0 || i >= len(c.nodes) {
		return fmt.Errorf("natscluster: no node %d", i)
	}
	for j := range c.nodes {
		if j == i {
			continue
		}
		for _, k := range [][2]int{{i, j}, {j, i}} {
			if freeze {
				c.proxies[k].Freeze()
			} else {
				c.proxies[k].Thaw()
			}
		}
	}
	if freeze {
		c.logf("natscluster: routes of %s frozen", c.Name(i))
	} else {
		c.logf("natscluster: routes of %s thawed", c.Name(i))
	}
	return nil
}
