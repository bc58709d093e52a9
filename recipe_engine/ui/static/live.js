// recipe-engine ui: live updates, sortable tables and the chat. Shipped with the package, no
// library. A page whose <body> has data-live polls that JSON route while its run is going and
// updates the stages' state and step count in place; when the run's state changes it reloads.
// A job's page (data-job) does the same with the job's state and output. A chat pane starts
// and stops its worker and shows each answer as it streams (server-sent events over fetch);
// requests that change anything carry the server's token from the page's <meta>.
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

const JOB_GOING = new Set(["running", "stopping"]);

function startJobLive() {
  const body = document.body;
  const url = body.dataset.job;
  if (!url || !JOB_GOING.has(body.dataset.state)) return;
  const tick = async () => {
    try {
      const answer = await fetch(url, { headers: { Accept: "application/json" } });
      if (answer.ok) {
        const job = await answer.json();
        if (job.state !== body.dataset.state) { location.reload(); return; }
        const output = document.querySelector("[data-job-output]");
        if (output) {
          output.textContent = job.output;
          output.scrollTop = output.scrollHeight; // its end, as a terminal shows it
        }
        const events = document.querySelector("[data-job-events]");
        if (events && job.events.length) {
          events.replaceChildren(...job.events.map((line) => {
            const item = document.createElement("li");
            item.textContent = line;
            return item;
          }));
        }
        const runs = document.querySelector("[data-job-runs]");
        if (runs && job.runs.length && runs.querySelectorAll("a").length !== job.runs.length) {
          runs.replaceChildren(...job.runs.map((run) => {
            const item = document.createElement("li");
            const link = document.createElement("a");
            link.href = `/run/${run}`;
            link.textContent = run;
            item.appendChild(link);
            return item;
          }));
        }
        const note = document.querySelector(".live-note");
        if (note) note.textContent = `updated ${new Date().toLocaleTimeString()}`;
      }
    } catch (error) {
      // the server went away: keep the page as it is
    }
    setTimeout(tick, 2000);
  };
  setTimeout(tick, 2000);
}

function token() {
  const meta = document.querySelector('meta[name="recipe-engine-token"]');
  return meta ? meta.content : "";
}

async function postJson(url, body) {
  const answer = await fetch(url, {
    method: "POST",
    headers: { "Content-Type": "application/json", "X-Recipe-Engine-Token": token() },
    body: JSON.stringify(body),
  });
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(data.refused || `${answer.status}`);
  return data;
}

class ChatPane {
  constructor(element) {
    this.element = element;
    this.target = { run: element.dataset.run, model: element.dataset.model };
    this.badge = element.querySelector("[data-chat-state]");
    this.settings = element.querySelector("[data-chat-settings]");
    this.answer = element.querySelector("[data-chat-answer]");
    this.error = element.querySelector("[data-chat-error]");
    const start = element.querySelector("[data-chat-start]");
    const stop = element.querySelector("[data-chat-stop]");
    if (start) start.addEventListener("click", () => this.start());
    if (stop) stop.addEventListener("click", () => this.stop());
    this.refresh();
  }

  show(state) {
    this.state = state.state;
    this.badge.textContent = state.state;
    this.badge.className = `state state-${state.state}`;
    this.element.dataset.state = state.state;
    this.settings.textContent = state.generation ? `generation: ${state.generation}` : "";
    this.error.textContent = state.error || "";
  }

  async refresh() {
    const query = new URLSearchParams(this.target);
    try {
      const answer = await fetch(`/api/chat/state?${query}`);
      if (answer.ok) this.show(await answer.json());
    } catch (error) {
      return;
    }
    if (this.state === "loading") setTimeout(() => this.refresh(), 1000);
  }

  async start() {
    try {
      this.show(await postJson("/api/chat/start", this.target));
    } catch (error) {
      this.error.textContent = error.message;
    }
    if (this.state === "loading") setTimeout(() => this.refresh(), 1000);
  }

  async stop() {
    try {
      this.show(await postJson("/api/chat/stop", this.target));
    } catch (error) {
      this.error.textContent = error.message;
    }
  }

  async ask(prompt, image) {
    this.answer.textContent = "";
    this.answer.dataset.done = "";
    this.error.textContent = "";
    const answer = await fetch("/api/chat/ask", {
      method: "POST",
      headers: { "Content-Type": "application/json", "X-Recipe-Engine-Token": token() },
      body: JSON.stringify({ ...this.target, prompt, image }),
    });
    if (!answer.ok) {
      const data = await answer.json().catch(() => ({}));
      this.error.textContent = data.refused || `${answer.status}`;
      return;
    }
    const reader = answer.body.getReader();
    const decoder = new TextDecoder();
    let buffered = "";
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      buffered += decoder.decode(value, { stream: true });
      let end;
      while ((end = buffered.indexOf("\n\n")) >= 0) {
        const block = buffered.slice(0, end);
        buffered = buffered.slice(end + 2);
        const line = block.split("\n").find((l) => l.startsWith("data: "));
        if (line) this.event(JSON.parse(line.slice(6)));
      }
    }
  }

  event(data) {
    if (data.text !== undefined) this.answer.textContent += data.text;
    if (data.answer !== undefined) {
      this.answer.textContent = data.answer;
      this.answer.dataset.done = "yes";
    }
    if (data.error !== undefined) {
      this.error.textContent = data.error;
      this.answer.dataset.done = "error";
    }
  }
}

async function upload(file) {
  const answer = await fetch("/api/upload", {
    method: "POST",
    headers: { "Content-Type": file.type || "application/octet-stream", "X-Recipe-Engine-Token": token() },
    body: file,
  });
  const data = await answer.json().catch(() => ({}));
  if (!answer.ok) throw new Error(data.refused || `${answer.status}`);
  return data.image;
}

function chatBox(box) {
  const panes = Array.from(box.querySelectorAll(".chat-pane")).map((pane) => new ChatPane(pane));
  const form = box.querySelector("[data-chat-ask]");
  if (!form) return;
  const note = form.querySelector("[data-chat-note]");
  const picture = form.querySelector('input[type="file"]');
  const preview = form.querySelector("[data-chat-picture]");
  if (picture && preview) {
    picture.addEventListener("change", () => {
      const file = picture.files[0];
      preview.hidden = !file;
      if (file) preview.src = URL.createObjectURL(file);
    });
  }
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    const prompt = form.elements.prompt.value.trim();
    if (!prompt) return;
    note.textContent = "asking";
    let image = null;
    try {
      if (picture && picture.files[0]) image = await upload(picture.files[0]);
    } catch (error) {
      note.textContent = "";
      panes.forEach((pane) => { pane.error.textContent = error.message; });
      return;
    }
    await Promise.all(panes.map((pane) => pane.ask(prompt, image)));
    note.textContent = "answered";
  });
}

document.addEventListener("DOMContentLoaded", () => {
  startLive();
  startJobLive();
  document.querySelectorAll("[data-job-output]").forEach((el) => { el.scrollTop = el.scrollHeight; });
  document.querySelectorAll("table.sortable").forEach(sortable);
  document.querySelectorAll("[data-chat-box]").forEach(chatBox);
});
