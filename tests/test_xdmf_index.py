"""The XDMF index (snapshots.xmf) kept in memory equals one rebuilt from the snapshot file."""

from __future__ import annotations

import h5py

import parsim
from parsim.output import SnapshotWriter, XdmfIndex


def test_the_index_written_snapshot_by_snapshot_equals_a_rebuild(tmp_path):
    """Snapshots at several steps, one step written again (a failed state replaces it), and a
    reopening for a restart that drops the later snapshots:
    after each, snapshots.xmf is the index rebuilt from the HDF5 file (it used to be rebuilt
    that way at every snapshot, which made writing quadratic in their number)."""
    sim = parsim.Simulation(dt=1e-4, domain=([0, 0, 0], [1, 1, 1]), gravity=(0, 0, -9.81))
    m = sim.add_material("m", 1000.0, restitution=0.5, collision_time=1e-3)
    sim.add_sphere((0.5, 0.5, 0.5), 0.05, m)
    sim.add_sphere((0.2, 0.5, 0.5), 0.05, m)
    out = tmp_path / "run"

    def rebuilt() -> str:
        with h5py.File(out / "snapshots.h5", "r") as f:
            XdmfIndex(tmp_path / "ref.xmf", f["snapshots"]).write()
        return (tmp_path / "ref.xmf").read_text()

    w = SnapshotWriter(out, "", "", sim)
    for k in range(4):
        w.write(sim)
        assert (out / "snapshots.xmf").read_text() == rebuilt(), k
        sim.run(5)
    w.write(sim)                                   # step 20
    w.write(sim, status="failed")                  # step 20 again
    w.close()
    text = (out / "snapshots.xmf").read_text()
    assert text == rebuilt() and text.count('<Grid Name="') == 1 + 5
    w = SnapshotWriter(out, "", "", sim, append_after=10)    # a restart from step 10
    assert (out / "snapshots.xmf").read_text() == rebuilt()
    assert (out / "snapshots.xmf").read_text().count('<Grid Name="') == 1 + 3
    w.close()
