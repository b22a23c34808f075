"""Signing in and out of the console (Django's auth views with our template)."""

from __future__ import annotations

from django.contrib.auth import views as auth_views


class ConsoleLoginView(auth_views.LoginView):
    """The console's sign-in form; a signed-in user goes straight to the console."""

    template_name = "routing/login.html"
    redirect_authenticated_user = True


class ConsoleLogoutView(auth_views.LogoutView):
    """Signs out (POST only, as Django requires) and returns to the sign-in form."""
