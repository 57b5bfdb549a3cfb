"""Accounts in the admin: Django's own user pages, except that an account is never
deleted as a row. Deleting one would blank the name on every record that names it
(batches, budgets, bonuses settled, jobs) and cut the links the money rules read
(address hashes, the writer of each example), so the admin's delete is replaced by
an action that deletes the account as ``crowd.accounts.delete_account`` does: the
person is wiped, the row and its links stay under a pseudonym."""

from django.contrib import admin, messages
from django.contrib.auth import get_user_model
from django.contrib.auth.admin import UserAdmin

from core.errors import DomainError
from crowd.accounts import delete_account

User = get_user_model()


@admin.action(description="Delete the selected accounts (wiped; their records stay under a pseudonym)",
              permissions=["scrub"])
def delete_accounts(modeladmin, request, queryset):
    done = 0
    for user in queryset.order_by("pk"):
        try:
            delete_account(user, by=request.user)
            done += 1
        except DomainError as exc:
            modeladmin.message_user(request, f"{user.get_username()}: {exc.message}", messages.ERROR)
    if done:
        modeladmin.message_user(request, f"{done} account(s) deleted: they cannot sign in again, and their records "
                                         "name them by a pseudonym.", messages.SUCCESS)


class AccountAdmin(UserAdmin):
    actions = [delete_accounts]

    def has_delete_permission(self, request, obj=None):
        return False  # never the row: the action above

    def has_scrub_permission(self, request):
        return request.user.is_active and request.user.is_superuser


if admin.site.is_registered(User):
    admin.site.unregister(User)
admin.site.register(User, AccountAdmin)
