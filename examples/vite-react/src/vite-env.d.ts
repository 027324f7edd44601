/// <reference types="vite/client" />

interface ImportMetaEnv {
  /** The API's origin, when it is not this page's own. */
  readonly VITE_ONCECLICK_URL?: string;
  /** A token baked in at build time, for local tries only. */
  readonly VITE_ONCECLICK_TOKEN?: string;
}
