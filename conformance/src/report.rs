//! Results of a run and their rendering: one line per check, a
//! per-workflow markdown table, the `N passed, M failed` summary, or JSON.

use serde::Serialize;

use crate::check::Workflow;

/// The outcome of one check.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CheckResult {
    pub workflow: Workflow,
    pub name: String,
    pub passed: bool,
    /// Why it failed (absent when it passed).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

impl CheckResult {
    /// `PASS <workflow> <name>` or `FAIL <workflow> <name> -- <reason>`.
    pub fn line(&self) -> String {
        let status = if self.passed { "PASS" } else { "FAIL" };
        let mut line = format!("{status} {:<10} {}", self.workflow.as_str(), self.name);
        if let Some(reason) = &self.reason {
            line.push_str(" -- ");
            line.push_str(reason);
        }
        line
    }
}

/// Passed and failed counts of one workflow.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct WorkflowTally {
    pub workflow: Workflow,
    pub passed: usize,
    pub failed: usize,
}

/// Everything a run found.
#[derive(Debug, Clone, Serialize)]
pub struct Report {
    /// The registry base URL.
    pub registry: String,
    /// The repository checked (and its sibling used for mounts).
    pub repository: String,
    /// The id that made this run's tags and content unique.
    pub run_id: String,
    pub results: Vec<CheckResult>,
}

impl Report {
    pub fn passed(&self) -> usize {
        self.results.iter().filter(|r| r.passed).count()
    }

    pub fn failed(&self) -> usize {
        self.results.len() - self.passed()
    }

    /// Whether every check passed (and there was at least one).
    pub fn all_passed(&self) -> bool {
        !self.results.is_empty() && self.failed() == 0
    }

    /// Counts per workflow, in [`Workflow::ALL`] order, skipping workflows
    /// with no checks.
    pub fn tallies(&self) -> Vec<WorkflowTally> {
        Workflow::ALL
            .iter()
            .filter_map(|&w| {
                let of_w = self.results.iter().filter(|r| r.workflow == w);
                let (passed, failed) =
                    of_w.fold(
                        (0, 0),
                        |(p, f), r| if r.passed { (p + 1, f) } else { (p, f + 1) },
                    );
                (passed + failed > 0).then_some(WorkflowTally {
                    workflow: w,
                    passed,
                    failed,
                })
            })
            .collect()
    }

    /// The per-workflow markdown table.
    pub fn markdown_table(&self) -> String {
        let mut out = String::from("| workflow | passed | failed |\n|---|---:|---:|\n");
        for t in self.tallies() {
            out.push_str(&format!(
                "| {} | {} | {} |\n",
                t.workflow.as_str(),
                t.passed,
                t.failed
            ));
        }
        out
    }

    /// `N passed, M failed`.
    pub fn summary_line(&self) -> String {
        format!("{} passed, {} failed", self.passed(), self.failed())
    }

    /// The text report without the per-check lines (those are printed as
    /// checks finish): a blank line, the table, a blank line, the summary.
    pub fn text_footer(&self) -> String {
        format!("\n{}\n{}\n", self.markdown_table(), self.summary_line())
    }

    /// The whole text report: check lines, table, summary.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        for r in &self.results {
            out.push_str(&r.line());
            out.push('\n');
        }
        out.push_str(&self.text_footer());
        out
    }

    /// The report as JSON: registry, repository, run id, results, per
    /// workflow tallies and totals.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "registry": self.registry,
            "repository": self.repository,
            "run_id": self.run_id,
            "results": self.results,
            "workflows": self.tallies(),
            "passed": self.passed(),
            "failed": self.failed(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(workflow: Workflow, name: &str, reason: Option<&str>) -> CheckResult {
        CheckResult {
            workflow,
            name: name.into(),
            passed: reason.is_none(),
            reason: reason.map(str::to_string),
        }
    }

    fn sample() -> Report {
        Report {
            registry: "http://127.0.0.1:5000/".into(),
            repository: "conformance/test".into(),
            run_id: "abc".into(),
            results: vec![
                result(Workflow::Base, "api", None),
                result(Workflow::Push, "upload", None),
                result(
                    Workflow::Push,
                    "mount",
                    Some("POST /x: expected status 201, got 202"),
                ),
                result(
                    Workflow::Discovery,
                    "referrers",
                    Some("precondition: push failed"),
                ),
            ],
        }
    }

    #[test]
    fn lines_show_status_workflow_name_and_reason() {
        let r = sample();
        assert_eq!(r.results[0].line(), "PASS base       api");
        assert_eq!(
            r.results[2].line(),
            "FAIL push       mount -- POST /x: expected status 201, got 202"
        );
    }

    #[test]
    fn table_lists_workflows_with_checks_in_order() {
        assert_eq!(
            sample().markdown_table(),
            "| workflow | passed | failed |\n\
             |---|---:|---:|\n\
             | base | 1 | 0 |\n\
             | push | 1 | 1 |\n\
             | discovery | 0 | 1 |\n"
        );
    }

    #[test]
    fn summary_and_totals() {
        let r = sample();
        assert_eq!(r.summary_line(), "2 passed, 2 failed");
        assert!(!r.all_passed());
        let text = r.to_text();
        assert!(text.ends_with("\n2 passed, 2 failed\n"), "{text}");
        assert_eq!(text.lines().filter(|l| l.starts_with("FAIL")).count(), 2);
        let ok = Report {
            results: vec![result(Workflow::Pull, "x", None)],
            ..sample()
        };
        assert!(ok.all_passed());
        assert_eq!(ok.summary_line(), "1 passed, 0 failed");
        let empty = Report {
            results: vec![],
            ..sample()
        };
        assert!(!empty.all_passed());
    }

    #[test]
    fn json_has_results_and_tallies() {
        let j = sample().to_json();
        assert_eq!(j["passed"], 2);
        assert_eq!(j["failed"], 2);
        assert_eq!(j["workflows"][1]["workflow"], "push");
        assert_eq!(j["workflows"][1]["failed"], 1);
        assert_eq!(
            j["results"][2]["reason"],
            "POST /x: expected status 201, got 202"
        );
        assert!(j["results"][0].get("reason").is_none());
    }
}
