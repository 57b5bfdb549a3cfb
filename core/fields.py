"""Request fields that take JSON types as they are.

DRF's fields convert what they can: ``0`` becomes the text ``"0"``, ``"12"`` the
number 12, ``"true"`` or ``1`` a boolean. For an API whose schema promises types,
that accepts requests the schema calls invalid. These fields refuse a value of
the wrong JSON type with a 400 that says which type was expected.
"""

from django.db import models
from rest_framework import serializers


class StrictCharField(serializers.CharField):
    default_error_messages = {"invalid": "Must be text (a JSON string)."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictSlugField(serializers.SlugField):
    def __init__(self, **kwargs):
        kwargs.setdefault("trim_whitespace", False)  # " a" is not a slug, as the schema's pattern says
        super().__init__(**kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            raise serializers.ValidationError("Must be text (a JSON string).", code="invalid")
        return super().to_internal_value(data)


class StrictIntegerField(serializers.IntegerField):
    default_error_messages = {"invalid": "Must be a whole number (a JSON integer)."}

    def to_internal_value(self, data):
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictIntegerChoiceField(serializers.ChoiceField):
    """One of a few whole numbers, given as a JSON integer (not "10", not true)."""

    def to_internal_value(self, data):
        if not isinstance(data, int) or isinstance(data, bool):
            self.fail("invalid_choice", input=data)
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    default_error_messages = {"invalid": "Must be true or false (a JSON boolean)."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


class StrictChoiceField(serializers.ChoiceField):
    default_error_messages = {"invalid_choice": '"{input}" is not a valid choice.',
                              "invalid": "Must be text (a JSON string)."}

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictModelSerializer(serializers.ModelSerializer):
    """A ModelSerializer whose text, slug, integer, boolean and choice fields are strict."""

    serializer_field_mapping = {
        **serializers.ModelSerializer.serializer_field_mapping,
        models.CharField: StrictCharField,
        models.TextField: StrictCharField,
        models.SlugField: StrictSlugField,
        models.IntegerField: StrictIntegerField,
        models.PositiveIntegerField: StrictIntegerField,
        models.PositiveSmallIntegerField: StrictIntegerField,
        models.BooleanField: StrictBooleanField,
    }
    serializer_choice_field = StrictChoiceField
