from functions.common.health import HealthRecord, health_record_name


def test_health_record_round_trips_through_configmap_data():
    record = HealthRecord("3f2a9c1d0b", 4, "CrashLoopBackOff: exit 1", "2026-12-02T10:00:00Z")
    assert HealthRecord.from_data(record.to_data()) == record
    assert all(isinstance(v, str) for v in record.to_data().values())


def test_malformed_failure_count_reads_as_zero():
    assert (
        HealthRecord.from_data({"consecutiveStartFailures": "many"}).consecutive_start_failures == 0
    )
    assert (
        HealthRecord.from_data({"consecutiveStartFailures": "-3"}).consecutive_start_failures == 0
    )


def test_health_record_name_is_per_model_replica():
    assert health_record_name("llama-3-1-8b-us-east-1") == "llama-3-1-8b-us-east-1-health"
