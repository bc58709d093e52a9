// recipe-engine ui: live updates and sortable tables. Shipped with the package, no library.
// A page whose <body> has data-live polls that JSON route while its run is going and updates
// the stages' state and step count in place; when the run's state changes it reloads.
"use strict";

const GOING = new Set(["running", "submitted"]);

function setText(root, field, value) {
  root.querySelectorAll(`[data-field="${field}"]`).forEach((el) => { el.textContent = value; });
}

function stepText(stage) {
  if (stage.step === null || stage.step === undefined) return stage.key === "-" ? "" : stage.key.slice(0, 12);
  return stage.total ? `step ${stage.step} / ${stage.total}` : `step ${stage.step}`;
}

function updateStage(stage) {
  document.querySelectorAll(`[data-stage="${CSS.escape(stage.name)}"]`).forEach((el) => {
    setText(el, "state", stage.state);
    setText(el, "detail", stage.detail);
    setText(el, "step", stepText(stage));
    el.querySelectorAll(".state").forEach((badge) => { badge.className = `state state-${stage.state}`; });
    if (el.classList.contains("node")) {
      el.setAttribute("class", `node state-${stage.state}`);
      el.setAttribute("aria-label", `stage ${stage.name}: ${stage.state}${stage.detail ? ", " + stage.detail : ""}`);
    }
  });
}

function updateCurves(curves) {
  curves.forEach((curve) => {
    const line = document.querySelector(`polyline[data-curve="${CSS.escape(curve.name)}"]`);
    if (!line) return;
    line.setAttribute("points", curve.points);
    const label = (attr, text) => {
      const el = document.querySelector(`[${attr}="${CSS.escape(curve.name)}"]`);
      if (el) el.textContent = text;
    };
    label("data-curve-max", curve.values[1].toPrecision(3));
    label("data-curve-min", curve.values[0].toPrecision(3));
    label("data-curve-last", `step ${Math.round(curve.steps[1])}`);
  });
}

async function poll(url, body) {
  let data;
  try {
    const answer = await fetch(url, { headers: { Accept: "application/json" } });
    if (!answer.ok) return;
    data = await answer.json();
  } catch (error) {
    return; // the server went away: keep the page as it is
  }
  const runState = data.stages ? data.state : data.run_state;
  if (data.stages) data.stages.forEach(updateStage);
  else {
    updateStage(data);
    const curves = data.curves || [];
    if (curves.length && !document.querySelector("polyline[data-curve]")) { location.reload(); return; }
    updateCurves(curves);
  }
  if (runState !== body.dataset.state) { location.reload(); return; }
  const note = document.querySelector(".live-note");
  if (note) note.textContent = `updated ${new Date().toLocaleTimeString()}`;
}

function startLive() {
  const body = document.body;
  const url = body.dataset.live;
  if (!url || !GOING.has(body.dataset.state)) return;
  const every = 2000;
  const tick = async () => {
    await poll(url, body);
    if (GOING.has(body.dataset.state)) setTimeout(tick, every);
  };
  setTimeout(tick, every);
}

function sortable(table) {
  const buttons = table.querySelectorAll("thead button[data-sort]");
  buttons.forEach((button) => {
    button.addEventListener("click", () => {
      const column = Number(button.dataset.sort);
      const th = button.closest("th");
      const ascending = th.getAttribute("aria-sort") !== "ascending";
      table.querySelectorAll("thead th").forEach((h) => h.removeAttribute("aria-sort"));
      th.setAttribute("aria-sort", ascending ? "ascending" : "descending");
      const body = table.tBodies[0];
      const rows = Array.from(body.rows);
      const key = (row) => {
        const text = row.cells[column].textContent.trim();
        const number = parseFloat(text.replace(/^[^\d.-]+/, ""));
        return Number.isNaN(number) ? text : number;
      };
      rows.sort((a, b) => {
        const x = key(a), y = key(b);
        const order = typeof x === "number" && typeof y === "number" ? x - y : String(x).localeCompare(String(y));
        return ascending ? order : -order;
      });
      rows.forEach((row) => body.appendChild(row));
    });
  });
}

document.addEventListener("DOMContentLoaded", () => {
  startLive();
  document.querySelectorAll("table.sortable").forEach(sortable);
});
