import { timestampDate } from "@bufbuild/protobuf/wkt";
import { type ApiKey, KeyStatus } from "../../gen/tollgate/auth/v1/auth_pb.js";
import type { PageContext } from "../context.js";
import { copyButton, errorLine, h, loading, messageOf, mount, table } from "../dom.js";
import { auth } from "../rpc.js";
import { spendCapsSection } from "./spend-caps.js";

/** When a timestamp happened, or a dash. */
export function when(ts: Parameters<typeof timestampDate>[0] | undefined): string {
  return ts === undefined ? "—" : timestampDate(ts).toLocaleString();
}

/** API keys: create (secret shown once), list, revoke with a confirmation. */
export async function keysPage(ctx: PageContext): Promise<void> {
  const created = h("div", { id: "new-key" });
  const list = h("div", { id: "key-list" }, loading("keys"));
  const name = h("input", {
    id: "key-name",
    name: "name",
    maxlength: 200,
    placeholder: "e.g. laptop",
    required: true,
  });
  const createButton = h("button", { type: "submit" }, "Create key");
  const formError = h("p", { class: "error", role: "alert" });
  const form = h("form", { class: "row", id: "create-key" }, h("label", {}, "Key name", name), createButton);
  form.addEventListener("submit", async (event) => {
    event.preventDefault();
    createButton.disabled = true;
    formError.textContent = "";
    try {
      const res = await auth.createKey({ name: name.value });
      name.value = "";
      mount(
        created,
        h(
          "section",
          { class: "panel", role: "alert" },
          h("h2", {}, `Key “${res.key?.name || res.key?.prefix}” created`),
          h(
            "p",
            { class: "warning" },
            "Copy this key now. It will not be shown again: the gateway keeps only a digest of it.",
          ),
          h("code", { class: "secret", id: "new-key-secret" }, res.secret),
          h(
            "div",
            { class: "row" },
            copyButton(res.secret, "Copy key"),
            h(
              "button",
              {
                type: "button",
                class: "secondary",
                onclick: () => mount(created),
              },
              "I have stored it",
            ),
          ),
        ),
      );
      await Promise.all([drawList(), caps.draw()]);
    } catch (error) {
      formError.textContent = messageOf(error);
    } finally {
      createButton.disabled = false;
    }
  });

  const revokeCell = (key: ApiKey): HTMLElement => {
    const cell = h("div", { class: "row" });
    const ask = () => {
      const confirm = h(
        "button",
        { type: "button", class: "danger", "data-confirm-revoke": key.id },
        "Confirm revoke",
      );
      const cancel = h("button", { type: "button", class: "secondary" }, "Cancel");
      confirm.addEventListener("click", async () => {
        confirm.disabled = true;
        try {
          await auth.revokeKey({ keyId: key.id });
          await Promise.all([drawList(), caps.draw()]);
        } catch (error) {
          mount(cell, errorLine(error));
        }
      });
      cancel.addEventListener("click", () => initial());
      mount(cell, h("span", {}, "Calls with this key will fail at once."), confirm, cancel);
      confirm.focus();
    };
    const initial = () =>
      mount(
        cell,
        h("button", { type: "button", class: "secondary", "data-revoke": key.id, onclick: ask }, "Revoke"),
      );
    initial();
    return cell;
  };

  const drawList = async () => {
    try {
      const { keys } = await auth.listKeys({});
      if (keys.length === 0) {
        mount(list, h("p", { class: "muted" }, "No keys yet: create one above."));
        return;
      }
      mount(
        list,
        table(
          ["Name", "Prefix", "Created", "Last used", "Status", ""],
          keys.map((key) => [
            key.name || "—",
            h("code", {}, key.prefix),
            when(key.createdAt),
            when(key.lastUsedAt),
            h("span", { "data-key-status": key.id }, key.status === KeyStatus.ACTIVE ? "active" : "revoked"),
            key.status === KeyStatus.ACTIVE ? revokeCell(key) : "",
          ]),
        ),
      );
    } catch (error) {
      mount(list, errorLine(error));
    }
  };

  const caps = spendCapsSection(ctx);
  mount(
    ctx.main,
    h("h1", {}, "API keys"),
    form,
    formError,
    created,
    h("h2", {}, "Your keys"),
    list,
    caps.element,
  );
  await Promise.all([drawList(), caps.draw()]);
}
