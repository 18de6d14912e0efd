"""The certificate-expiry alert under the real `promtool test rules`: it fires for a
certificate that expires within 14 days and stays quiet for one that does not, and for one
renewed in place (the series' value moves out, as the metric reads the file at each
scrape). Labels are the ones the exporter writes (functions/runtime/shared/cert_expiry.py).
"""

from tests.runtime.test_hub_alerts import promtool, rule_file, run_promtool_tests  # noqa: F401

DAY = 86400


def series(subject: str, values: str) -> dict:
    return {
        "series": "modelplane_certificate_expiry_timestamp_seconds{"
        f'component="scaler",file="/tls/tls.crt",subject="{subject}"}}',
        "values": values,
    }


def expiring(subject: str) -> dict:
    return {
        "exp_labels": {
            "severity": "warning",
            "component": "scaler",
            "file": "/tls/tls.crt",
            "subject": subject,
        }
    }


CERTIFICATE_TESTS = {
    "rule_files": ["rules.yaml"],
    "evaluation_interval": "1m",
    "tests": [
        {
            # promtool's clock starts at 0: "soon" expires on day 10, "later" on day 90,
            # "renewed" on day 10 until it is renewed (to day 400) at minute 30.
            "interval": "1m",
            "input_series": [
                series("CN=soon", f"{10 * DAY}x60"),
                series("CN=later", f"{90 * DAY}x60"),
                series("CN=renewed", f"{10 * DAY}x29 {400 * DAY}x30"),
            ],
            "alert_rule_test": [
                # Not yet for its 10 minutes.
                {"eval_time": "5m", "alertname": "CertificateExpiringSoon", "exp_alerts": []},
                {
                    "eval_time": "20m",
                    "alertname": "CertificateExpiringSoon",
                    "exp_alerts": [expiring("CN=renewed"), expiring("CN=soon")],
                },
                {
                    "eval_time": "45m",
                    "alertname": "CertificateExpiringSoon",
                    "exp_alerts": [expiring("CN=soon")],
                },
            ],
        }
    ],
}


def test_certificate_expiry_alert_fires_within_14_days_and_clears_on_renewal(
    promtool,  # noqa: F811
    rule_file,  # noqa: F811
):
    run_promtool_tests(promtool, rule_file, CERTIFICATE_TESTS, "certificate-tests.yaml")
