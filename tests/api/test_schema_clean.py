"""The OpenAPI schema is generated without a warning: two serializers of one name would
otherwise share one component, and a client would read one endpoint's answer by the
other's schema (as the worker page's and the onboarding's "Standing" once did)."""

import pytest
from django.core.management import call_command


@pytest.mark.django_db
def test_the_schema_generates_and_validates_without_a_warning(tmp_path):
    out = tmp_path / "schema.yaml"
    call_command("spectacular", "--validate", "--fail-on-warn", "--file", str(out))
    assert "OnboardingStandingSerializer" not in out.read_text()  # components are named, not the classes
    assert "/api/me/:" in out.read_text() and "/api/tasks/{slug}/onboarding/:" in out.read_text()
