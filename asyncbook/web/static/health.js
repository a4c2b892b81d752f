"use strict";
// The banner every page shows while tasks are overdue and no sweep ran for 30 s
// (GET /api/health answers 503 then); checked every 5 s, hidden again once it is well.
(function () {
  const CHECK_MS = 5000;
  const banner = document.createElement("div");
  banner.id = "health-banner";
  banner.className = "health-banner";
  banner.setAttribute("role", "alert");
  banner.hidden = true;
  document.querySelector("header").after(banner);

  function show(health) {
    const age = health.lastSweepAgeMs;
    const since = age === null ? "no sweep has ever run"
      : "the last sweep ran " + Math.round(age / 1000) + " s ago";
    banner.textContent = "The expiry sweep has stopped: " + health.overdueTasks +
      " task(s) are past their deadline and " + since + ". Is a worker or beat of an app " +
      "that calls install() running? Run `asyncbook doctor` to check the deployment.";
    banner.hidden = false;
  }

  async function check() {
    try {
      const response = await fetch("/api/health", { headers: { Accept: "application/json" } });
      const health = await response.json();
      if (health && health.ok === false) show(health); else banner.hidden = true;
    } catch (error) {
      // The server is unreachable: the page's own status line says so.
    }
  }
  check();
  setInterval(check, CHECK_MS);
})();
