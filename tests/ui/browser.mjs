// The web view in a real browser (Debian's chromium driven by
// playwright-core), run by tests/tests/ui.rs against a real `sealvol
// serve` it prepared: two versions of weights/demo pushed by `writer`, a
// folder to sync from, and what `sealvol stat` says of the second version.
// Every page is checked by axe-core (no serious or critical finding) and
// saved as a screenshot under OUT. Prints one JSON line of page timings;
// any failed check throws, and the process exits non-zero.
//
// Environment: URL, PASSWORD, V1, V2 (b3: digests), STAT_REF (the pinned
// ref `sealvol stat` prints), STAT_OCI, SYNC_SOURCE (dir://…), OUT,
// BROWSER_DEPS (node_modules' parent), CHROMIUM.

import { createRequire } from "node:module";
import { readFileSync } from "node:fs";
import assert from "node:assert/strict";

const env = (k) => {
  const v = process.env[k];
  if (!v) throw new Error(`${k} is not set`);
  return v;
};
const require = createRequire(`${env("BROWSER_DEPS")}/node_modules/`);
const { chromium } = require("playwright-core");
const axeSource = readFileSync(require.resolve("axe-core/axe.min.js"), "utf8");

const URL = env("URL");
const OUT = env("OUT");
const [V1, V2] = [env("V1"), env("V2")];
const VOLUME = "weights/demo";
const timings = {};

const browser = await chromium.launch({
  executablePath: env("CHROMIUM"),
  // CI runs as root, where chromium's sandbox cannot start.
  args: ["--no-sandbox"],
});

/// A page that fails the test on a dialog (an injected script ran), a
/// CSP violation or a console error.
async function open(context) {
  const page = await context.newPage();
  page.on("dialog", (d) => {
    throw new Error(`a dialog opened: ${d.message()}`);
  });
  page.on("console", (m) => {
    // Refused requests the test makes on purpose log a failed load.
    if (m.type() === "error" && !/Failed to load resource/.test(m.text())) {
      throw new Error(`console error: ${m.text()}`);
    }
  });
  return page;
}

/// Checks the page with axe-core (injected through the devtools
/// protocol, which the page's CSP does not govern) and saves it.
async function check(page, name) {
  await page.evaluate(axeSource);
  const result = await page.evaluate(() =>
    // eslint-disable-next-line no-undef
    axe.run(document, { resultTypes: ["violations"] }),
  );
  const bad = result.violations.filter((v) => ["serious", "critical"].includes(v.impact));
  assert.deepEqual(
    bad.map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(" ")).join(", ")})`),
    [],
    `axe-core findings on ${name}`,
  );
  await page.screenshot({ path: `${OUT}/${name}.png`, fullPage: true });
}

async function timed(name, page, url) {
  const t0 = Date.now();
  const resp = await page.goto(url);
  timings[name] = Date.now() - t0;
  return resp;
}

async function login(page, user, shot) {
  // A page that needs a login sends the browser to the form.
  await page.goto(`${URL}/ui/`);
  assert.match(page.url(), /\/ui\/login\?next=/);
  if (shot) await check(page, shot);
  await page.getByLabel("User or API key id").fill(user);
  await page.getByLabel("Password or API key secret").fill(env("PASSWORD"));
  await page.getByRole("button", { name: "Log in" }).click();
  await page.waitForURL(`${URL}/ui/`);
  await page.getByText(`Signed in as ${user}`).waitFor();
}

// ---- the writer ----------------------------------------------------------
const writer = await browser.newContext({ permissions: ["clipboard-read", "clipboard-write"] });
let page = await open(writer);
await login(page, "writer", "00-login");
await timed("volumes", page, `${URL}/ui/`);
await page.getByRole("link", { name: VOLUME }).waitFor();
await check(page, "01-volumes");

// The filter box keeps only matching names.
await page.getByLabel("Filter by name").fill("nothing-like-this");
await page.getByRole("button", { name: "Filter" }).click();
await page.getByText("No volume to show.").waitFor();

// The volume: head, tags, storage saved by deduplication, the timeline.
await timed("volume", page, `${URL}/ui/volumes/${VOLUME}`);
await page.getByRole("heading", { name: VOLUME, level: 1 }).waitFor();
assert.equal(await page.locator("ol.timeline li").count(), 2);
assert.ok(Number(await page.locator("meter#stored").getAttribute("value")) > 0);
await check(page, "02-volume");

// The second version: the pinned ref and the commands, copied.
await timed("version", page, `${URL}/ui/volumes/${VOLUME}/-/versions/${V2}`);
assert.equal(await page.locator("#pinned").textContent(), env("STAT_REF"));
await page.locator("button.copy[data-copy=cmd-mount]").click();
await page.getByRole("button", { name: "Copied" }).waitFor();
const copied = await page.evaluate(() => navigator.clipboard.readText());
assert.equal(copied, `sealvol mount ${env("STAT_REF")} /mnt/${VOLUME}`);
assert.match(await page.locator("#cmd-k8s").textContent(), new RegExp(`reference: ${env("STAT_OCI").replace(/[.*+?^${}()|[\]\\]/g, "\\$&")}`));
// A file named like markup is text: no image element, no script ran.
const evil = "<img src=x onerror=alert(1)>";
await page.getByRole("rowheader", { name: evil, exact: true }).waitFor();
assert.equal(await page.locator("table.files img").count(), 0);
// The writer may delete: the button is there.
await page.getByRole("link", { name: "Delete this version…" }).waitFor();
await check(page, "03-version");

// The diff of the two versions.
await page.goto(`${URL}/ui/volumes/${VOLUME}`);
await page.getByLabel("Compare").selectOption(V1);
await page.getByLabel("with").selectOption(V2);
const t0 = Date.now();
await page.getByRole("button", { name: "Show the diff" }).click();
await page.getByRole("heading", { name: /^Changed/ }).waitFor();
timings.diff = Date.now() - t0;
await page.getByRole("rowheader", { name: "model.bin" }).waitFor();
await page.getByText("tokenizer.json").waitFor();
assert.ok(Number(await page.locator("meter#shared").getAttribute("value")) > 0);
await check(page, "04-diff");

// Actions: point a tag at v1, delete v1 (after the confirmation page),
// then restore it from the volume's timeline.
await page.goto(`${URL}/ui/volumes/${VOLUME}/-/versions/${V1}`);
await page.getByLabel("Point tag").fill("prod");
await page.getByRole("button", { name: "at this version" }).click();
await page.waitForURL(`${URL}/ui/volumes/${VOLUME}`);
await page.getByRole("rowheader", { name: "prod" }).waitFor();
await page.goto(`${URL}/ui/volumes/${VOLUME}/-/versions/${V1}`);
await page.getByRole("link", { name: "Delete this version…" }).click();
await page.getByRole("heading", { name: /^Delete version/ }).waitFor();
await check(page, "05-confirm-delete");
await page.getByRole("button", { name: "Delete the version" }).click();
await page.waitForURL(`${URL}/ui/volumes/${VOLUME}`);
await page.locator("ol.timeline li.deleted").getByText(/restorable for/).waitFor();
await page.getByRole("button", { name: "Restore" }).click();
await page.waitForURL(`${URL}/ui/volumes/${VOLUME}`);
assert.equal(await page.locator("ol.timeline li.deleted").count(), 0);

// A sync from a folder, watched until READY (the page refreshes itself).
await page.goto(`${URL}/ui/syncs`);
await page.getByText("Start a sync").click();
await page.getByLabel(/^Source/).fill(env("SYNC_SOURCE"));
await page.getByLabel("Destination volume").fill("weights/synced");
await page.getByRole("button", { name: "Start" }).click();
await page.waitForURL(/\/ui\/syncs\/sync-/);
await page.locator("#state", { hasText: "READY" }).waitFor({ timeout: 60_000 });
await check(page, "06-sync");
await page.goto(`${URL}/ui/syncs`);
await page.getByRole("cell", { name: "READY" }).first().waitFor();
await check(page, "07-syncs");

// ---- the reader ----------------------------------------------------------
const reader = await browser.newContext();
page = await open(reader);
await login(page, "reader");
await page.goto(`${URL}/ui/volumes/${VOLUME}/-/versions/${V1}`);
await page.locator("#pinned").waitFor();
assert.equal(await page.getByRole("link", { name: "Delete this version…" }).count(), 0);
assert.equal(await page.getByLabel("Point tag").count(), 0);
await check(page, "08-version-reader");
// A delete the reader crafts, from the view's own origin with its
// session: refused.
const forged = await page.evaluate(async (path) => {
  const r = await fetch(path, { method: "POST" });
  return { status: r.status, body: await r.text() };
}, `/ui/volumes/${VOLUME}/-/versions/${V1}/delete`);
assert.equal(forged.status, 403, forged.body);
// And through the API with the reader's password.
const api = await reader.request.delete(`${URL}/api/v1/volumes/${VOLUME}/-/versions/${V1}`, {
  headers: {
    Authorization: `Basic ${Buffer.from(`reader:${env("PASSWORD")}`).toString("base64")}`,
    "Content-Type": "application/json",
  },
});
assert.equal(api.status(), 403, await api.text());

await browser.close();
console.log(JSON.stringify({ timings }));
