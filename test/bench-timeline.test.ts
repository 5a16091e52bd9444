import { describe, expect, it } from "vitest";
import { pgLogEvents, timelineText } from "../bench/timeline.js";

/** A PostgreSQL log as the bench's server writes it (bench/timeline.ts, PG_TIMELINE_SETTINGS). */
const LOG = [
  "1795944000.500:31116:client backend: LOG:  duration: 12.500 ms  execute tollgate_place_holds: SELECT 1",
  "1795944001.000:31009:checkpointer: LOG:  checkpoint complete: wrote 3 buffers (0.0%); write=0.101 s, sync=0.002 s, total=0.250 s",
  '1795944002.000:31200:autovacuum worker: LOG:  automatic vacuum of table "t.public.holds": index scans: 0',
  "\tpages: 0 removed, 10 remain",
  "1795944002.000:31116:client backend: STATEMENT:  SELECT 1",
].join("\n");

describe("the bench's timeline", () => {
  it("reads PostgreSQL's log into events that start when the logged work began", () => {
    const events = pgLogEvents(LOG)
      .trim()
      .split("\n")
      .map((line) => JSON.parse(line) as { t: number; ms: number; proc: string; text: string });
    expect(events).toHaveLength(3);
    expect(events[0]).toMatchObject({ ms: 12.5, proc: "postgres client backend 31116" });
    expect(events[0]!.t).toBeCloseTo(1795944000500 - 12.5, 3);
    expect(events[1]).toMatchObject({ ms: 250, proc: "postgres checkpointer 31009" });
    expect(events[1]!.t).toBeCloseTo(1795944001000 - 250, 3);
    expect(events[2]).toMatchObject({ ms: 0, proc: "postgres autovacuum worker 31200" });
    expect(pgLogEvents("")).toBe("");
  });

  it("says who used the cores over a window, by role, per call", () => {
    const t0 = 1_000_000;
    const lines = [
      { t: t0, ev: "window.start", label: "w" },
      {
        t: t0,
        ev: "proc",
        pid: 10,
        cmd: "/usr/bin/node --import hook.js --max-semi-space-size=32 main.js serve ",
      },
      { t: t0, ev: "proc", pid: 11, cmd: "postgres: tollgate tollgate_1 127.0.0.1(5) idle" },
      { t: t0, ev: "proc", pid: 12, cmd: "/usr/bin/node dist/bench/load.js {}" },
      // Two calls, each complete.
      ...[1, 2].flatMap((req) =>
        [
          "arrive",
          "handler",
          "ledger.placeHold.sent",
          "ledger.placeHold.done",
          "upstream.create",
          "upstream.headers",
          "upstream.end",
          "ledger.settle.sent",
          "ledger.settle.done",
          "finish",
        ].map((ev, i) => ({
          t: t0 + 10 + req + i,
          req,
          ev,
          ...(ev === "arrive" ? { url: "/v1/messages" } : {}),
        })),
      ),
      ...Array.from({ length: 10 }, (_, i) => ({
        t: t0 + 100 * (i + 1),
        ev: "cpu",
        proc: "probe",
        used: { "node 10": 50, "postgres 11": 20, "node 12": 10 },
      })),
      { t: t0 + 1100, ev: "window.end" },
    ];
    const text = timelineText(lines.map((l) => JSON.stringify(l)).join("\n")).join("\n");
    // 10 samples a second apart over 1 s: 500 ms of the gateway's is half a core, 250 ms a call.
    expect(text).toMatch(/a gateway\s+0\.50 of a core, 250\.00 ms per call/);
    expect(text).toMatch(/PostgreSQL's backends\s+0\.20 of a core, 100\.00 ms per call/);
    expect(text).toMatch(/the load generator\s+0\.10 of a core,\s+50\.00 ms per call/);
    expect(text).toMatch(/the machine, all together\s+0\.80 of a core, 400\.00 ms per call/);
  });
});
